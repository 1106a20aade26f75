"""`pretrain experiment curriculum`: its length-warmup arm, and a tiny run of its page."""

import argparse
import json
import os
import re

import pytest

from pretrain import configs
from pretrain.experiments import curriculum
from tests.experiments import pages


@pytest.mark.slow
def test_curriculum_length_warmup_arm_ramps_the_rows():
  args = argparse.Namespace(steps=100, seq_len=64, batch_size=4, evals=2, d_model=32, num_layers=1, head_dim=16,
                            switch=0.5, ul2r=0.2)
  cfg = curriculum.arm_config(configs.load("quickstart"), "clm_length_warmup", args)
  assert cfg.data.objective == "clm" and cfg.data.length_schedule == ((0, 16), (10, 32), (20, 64))
  assert curriculum.describe("clm_length_warmup", args) == "CLM, rows of 16 then 32 tokens until steps 10 and 20"


@pytest.mark.slow
def test_curriculum_writes_table_verdicts_and_plot(tmp_path, cache_dir, vocabulary, monkeypatch, capsys):
  del vocabulary
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  out = str(tmp_path / "docs" / "curriculum")
  # One arm: the table's code is the same for each (the length warmup itself: tests/data/test_schedule.py).
  argv = ["--arms=clm_then_ul2", "--d_model=32", "--num_layers=1", "--head_dim=16", f"--out={out}",
          f"--out_dir={tmp_path / 'runs'}", "--seeds=0", "--probe_seeds=2", "--steps=10", "--batch_size=4",
          "--seq_len=64", "--evals=2", "--config.train.eval_batches=2"]
  curriculum.main(argv)
  assert os.path.getsize(out + ".png") > 0
  rows = pages.table_rows(out + ".md")
  assert [row.split("|")[1].strip() for row in rows] == [
      "initial parameters", "clm_then_ul2: CLM, then UL2 from step 8 (UL2R)", "unigram (counts, add-one)",
      "bigram (counts, interpolated Kneser-Ney)", "trigram (counts, interpolated Kneser-Ney)"]
  # One run: its figures alone, the probe's seeds averaged within it (no interval from one pre-training).
  assert re.search(r"\| 1 \| \d\.\d{3} \| \d\.\d{3} \| \d\.\d{3} \| \d+ \|", rows[1])
  assert all(re.search(r"\| \| \d\.\d{3} \| \| \| \|$", row) for row in rows[2:])  # CLM bits/byte of counts.
  text = " ".join(open(out + ".md").read().split())
  assert "**CLM val bits/byte** (lower is better):" in text and "above the initial parameters:" in text
  assert re.search(r"\[seed 0, 1/1\] clm_then_ul2 +CLM bits/byte \d", capsys.readouterr().out)
  # The UL2R arm trained UL2 in its last steps (from step 8; logged at steps 5 and 10), by its schedule.
  records = [json.loads(line) for line in open(tmp_path / "runs" / "clm_then_ul2" / "seed0" / "metrics.jsonl")]
  assert [r["data/rate/ul2_decoder"] for r in records if "data/rate/ul2_decoder" in r] == [0.0, 1.0]
  # Rerun from its saved runs (pretrain/experiments/arms.py): nothing trains or is measured again, the page is
  # the same, to the byte.
  page, run_files = open(out + ".md").read(), sorted(os.listdir(tmp_path / "runs" / "clm_then_ul2" / "seed0"))
  metrics_written = os.stat(tmp_path / "runs" / "clm_then_ul2" / "seed0" / "metrics.jsonl").st_mtime_ns
  os.remove(out + ".md")
  curriculum.main(argv)
  assert open(out + ".md").read() == page
  assert sorted(os.listdir(tmp_path / "runs" / "clm_then_ul2" / "seed0")) == run_files
  assert os.stat(tmp_path / "runs" / "clm_then_ul2" / "seed0" / "metrics.jsonl").st_mtime_ns == metrics_written
  assert "[seed 0, 1/1] clm_then_ul2" in capsys.readouterr().out


def test_a_probe_not_run_is_said_not_measured():
  """--probe_seeds=0: the probe's verdict said 'no two arms apart; above the initial parameters: none', a claim
  about a measure no run made."""
  curves = {curriculum.CLM_BPB: [(0, 3.0), (10, 2.0)], curriculum.UL2_LOSS: [(0, 5.0), (10, 4.0)]}
  results = {arm: [{"seed": seed, "curves": curves} for seed in (0, 1)] for arm in ("clm", "clm_then_ul2")}
  lines = curriculum.verdicts(results, [])
  assert lines[-1] == "- **same-document probe**: not measured." and "no two arms apart" in lines[0]
