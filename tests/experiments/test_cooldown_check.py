"""`pretrain experiment cooldown_check`: a tiny run of its page, and its verdicts."""

import json
import os
import re

import pytest

from pretrain.downstream import stats
from pretrain.experiments import cooldown_check
from tests.experiments import pages


@pytest.mark.slow
@pytest.mark.extended  # The whole page: see tests/conftest.py.
def test_cooldown_check_writes_table_verdicts_and_plot(tmp_path, cache_dir, vocabulary, monkeypatch, capsys):
  """Per seed a cosine run, a wsd run and its branch; the branch's data stream and rates are its parent's."""
  del vocabulary
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  out, out_dir = str(tmp_path / "cooldown"), tmp_path / "runs"
  cooldown_check.main(["--steps=10", "--seeds=0,1", "--fractions=0.2,0.4", "--shapes=1-sqrt", "--evals=2",
                       f"--out={out}", f"--out_dir={out_dir}", "--config.model.d_model=32",
                       "--config.model.num_layers=1", "--config.model.num_heads=2", "--config.model.num_kv_heads=2",
                       "--config.model.head_dim=16", "--config.model.mlp_dim=64", "--seq_len=32", "--batch_size=4",
                       "--config.optimizer.warmup_steps=2", "--config.train.log_every=1"])
  assert os.path.getsize(out + ".png") > 0
  rows = pages.tables(out + ".md")[0]
  assert [row.split("|")[1].strip() for row in rows] == [
      "untrained (step 0)", "cosine", "wsd_20_1-sqrt", "wsd_40_1-sqrt", "unigram (counts, add-one)",
      "bigram (counts, interpolated Kneser-Ney)", "trigram (counts, interpolated Kneser-Ney)"]
  figure = r"\d\.\d{3} \+- \d\.\d{3}"
  assert re.search(rf"\| 10 \| 2 \| {figure} \| [+-]\d\.\d{{3}} \+- \d\.\d{{3}} \| {figure} \|$", rows[2])
  assert re.search(rf"\| 4 \| 2 \| {figure} \| [+-]", rows[3])  # The branch costs its decay alone.
  text = " ".join(open(out + ".md").read().split())
  assert re.search(r"wsd_40_1-sqrt - cosine: [+-]\d\.\d{3} \+- \d\.\d{3} nats \(paired, n=2, p=\d\.\d{3}\)", text)
  assert "wsd_40_1-sqrt - wsd_20_1-sqrt:" in text and "pretrain cooldown --workdir=" in text
  records = lambda path: [json.loads(line) for line in open(path / "metrics.jsonl")]
  parent, branch = (records(out_dir / name / "seed=1") for name in ("wsd_20_1-sqrt", "wsd_40_1-sqrt"))
  losses = lambda rs: {r["step"]: r["train/loss"] for r in rs if "train/loss" in r}
  assert losses(branch)[7] == losses(parent)[7]  # Step 7: the branch (from 6) on the parent's batch, stable rate.
  assert "cosine" in capsys.readouterr().out


@pytest.mark.slow
def test_a_cooldown_verdict_says_below_cosine_only_after_holm():
  """An arm outside its own interval whose test does not survive Holm over the page's is not called below."""
  cosine = {0: 4.30, 1: 4.31, 2: 4.29}
  arm = lambda *gaps: {s: cosine[s] + g for s, g in enumerate(gaps)}
  clear, doubtful, level = arm(-0.050, -0.051, -0.049), arm(-0.010, -0.020, -0.015), arm(0.01, -0.01, 0.002)
  found = [(f"{name} - cosine", stats.compare(losses, cosine, pair=True))
           for name, losses in (("clear", clear), ("doubtful", doubtful), ("level", level))]
  found += [(f"filler_{i}", stats.compare(arm(0.01, -0.01, 0.0), arm(-0.01, 0.01, 0.0), pair=True)) for i in range(5)]
  doubtful_test = found[1][1]
  assert doubtful_test.mean + doubtful_test.half < 0 and doubtful_test.p > 0.05 / 7  # Apart alone, not after Holm.
  lines = cooldown_check.verdicts(found)
  assert lines[0].endswith("below cosine's loss, real after Holm.")
  assert lines[1].endswith("below cosine's loss by its own interval, not after Holm: not shown to differ.")
  assert lines[2].endswith(found[2][1].not_apart("nats", against="cosine's loss") + ".")
  assert "not shown to differ from cosine's loss (at this spread the seeds detect only differences of" in lines[2]
  one_seed = stats.compare({0: 4.2}, {0: 4.3}, pair=True)
  assert cooldown_check.verdicts([("single - cosine", one_seed)])[0].endswith("one seed: no interval.")
