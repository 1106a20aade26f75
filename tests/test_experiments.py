"""pretrain.experiments (tools/compare_objectives.py and tools/scaling.py): the power-law fit, and a tiny run of
each experiment."""

import argparse
import collections
import itertools
import json
import os
import re

import jax
import numpy as np
import pytest

from pretrain import configs
from pretrain.data import dedup
from pretrain.experiments import compare_moe
from pretrain.experiments import compare_objectives
from pretrain.experiments import compare_tokenizers
from pretrain.experiments import curriculum
from pretrain.experiments import data_quality
from pretrain.experiments import scaling
from pretrain.experiments import web_defects
from pretrain.system.errors import UserError
from tests.conftest import REPO

# Every test here trains, starts processes or compiles a model of each kind.
pytestmark = pytest.mark.slow

# A model and budget small enough for a CPU test: a few seconds of training per run.
TINY = ["--steps=3", "--batch_size=4", "--seq_len=64", "--evals=3", "--config.train.eval_batches=2"]


@pytest.mark.parametrize("nc, alpha, l_inf", [(8.8e13, 0.076, 1.7), (1e5, 0.5, 2.0), (3e4, 0.3, 0.0)])
def test_fit_power_law_recovers_known_parameters(nc, alpha, l_inf):
  n = np.geomspace(1e4, 3e6, 6)
  fitted = scaling.fit_power_law(n, scaling.power_law(n, nc, alpha, l_inf))
  assert fitted[0] == pytest.approx(nc, rel=0.03)
  assert fitted[1] == pytest.approx(alpha, rel=0.03)
  assert fitted[2] == pytest.approx(l_inf, rel=0.03, abs=1e-3)


def test_fit_power_law_refuses_too_few_points_and_rising_losses():
  with pytest.raises(ValueError, match="3 or more distinct sizes"):
    scaling.fit_power_law([1e4, 1e5], [5.0, 4.0])
  with pytest.raises(ValueError, match="3 or more distinct sizes"):
    scaling.fit_power_law([1e4, 1e4, 1e5], [5.0, 5.1, 4.0])
  with pytest.raises(ValueError, match="does not fall with N"):
    scaling.fit_power_law([1e4, 1e5, 1e6], [3.0, 4.0, 5.0])


def test_split_row_fits_each_objective():
  data = configs.load("quickstart").data
  assert compare_objectives.split_row("span_corruption", data, 100, 128) == (104, 24)  # T5's 512:114, scaled.
  assert compare_objectives.split_row("ul2", data, 100, 128) == (64, 64)
  assert compare_objectives.split_row("prefix_lm_decoder", data, 100, 128) == (64, 64)
  assert compare_objectives.split_row("mass", data, 100, 128) == (64, 64)  # Segments of 63, fragments of 32.
  with pytest.raises(UserError, match="no split of a row of --seq_len=6 tokens"):
    compare_objectives.split_row("ul2", data, 100, 6)


def test_contrastive_runs_with_its_dropout_and_the_others_without():
  import argparse  # pylint: disable=g-import-not-at-top
  base = configs.load("quickstart")
  args = argparse.Namespace(seq_len=128, steps=10, batch_size=16, evals=2, d_model=128, num_layers=2, head_dim=64,
                            num_heads=0, mlp_dim=0, enc_dec_layers=0)
  dropouts = {name: compare_objectives.run_config(base, name, args).model.dropout
              for name in compare_objectives.DEFAULT_OBJECTIVES.split(",")}
  assert dropouts.pop("contrastive") == 0.1 and set(dropouts.values()) == {0.0}


def _table_rows(path: str) -> list[str]:
  with open(path) as f:
    return [line for line in f if line.startswith("| ") and not line.startswith("| ---")][1:]


def _tables(path: str) -> list[list[str]]:
  """The rows (after the header) of each markdown table of a file."""
  with open(path) as f:
    blocks = f.read().split("\n\n")
  return [block.strip().split("\n")[2:] for block in blocks if block.startswith("| ")]


def test_compare_objectives_writes_curves_and_tables(tmp_path, cache_dir, vocabulary, monkeypatch, capsys):
  del vocabulary  # Built first, so the runs reuse it.
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  out = str(tmp_path / "docs" / "objectives")
  argv = ["--objectives=clm,span_corruption", "--d_model=32", "--num_layers=1", "--head_dim=16", f"--out={out}",
          f"--out_dir={tmp_path / 'runs'}", "--probe_documents=100", "--seeds=0,1", "--probe_seeds=2",
          "--finetune_seeds=1", "--finetune_steps=2", "--steps=10", "--evals=2", "--lr_grid=1e-3,1e-2",
          "--lr_seeds=7", *TINY]
  compare_objectives.main(argv)
  assert os.path.getsize(out + ".png") > 0
  rates, pretraining, zero_shot, probes = _tables(out + ".md")
  # Each objective's rate chosen on seed 7 (none of the reported runs'), its reported runs at that rate.
  chosen = {}
  for row in rates:
    name, low, high, rate = (cell.strip() for cell in row.strip("|").split("|"))
    chosen[name] = rate.split()[0]
    assert rate.split()[0] == ("0.001" if float(low) <= float(high) else "0.01") and "grid's edge" in rate
  for name, rate in chosen.items():
    saved = json.load(open(tmp_path / "runs" / name / "seed1" / "config.json"))
    assert saved["optimizer"]["learning_rate"] == float(rate) and saved["train"]["seed"] == 1
    assert os.path.exists(tmp_path / "runs" / name / f"lr{rate}" / "seed7" / "result.json")
  assert [row.split("|")[1].strip() for row in pretraining] == [
      "clm", "span_corruption", "unigram (counts, add-one)", "bigram (counts, interpolated Kneser-Ney)",
      "trigram (counts, interpolated Kneser-Ney)"]
  figure = r"\d\.\d{3} \+- \d\.\d{3}"  # A mean and its interval over the runs.
  gain = rf"{figure} \([+-]\d\.\d{{3}} \+- \d\.\d{{3}}\)"  # ... and the paired gain over the initial parameters.
  assert all(re.search(rf"\| 2 \| .*\| {figure} \(\d\.\d\d\) \| {figure} \(\d\.\d\d\) \|", row)
             for row in pretraining[:2])  # n, loss and bits/byte with their step-0 values.
  assert re.search(rf"\| {figure} \| accuracy 0\.\d{{3}}", pretraining[0])  # CLM's yardstick; its other metrics.
  assert "4 x 64 = 256" in pretraining[0] and "4 x (51 + 13) = 256" in pretraining[1]
  assert all(len(re.findall(gain, row)) == 4 for row in zero_shot[:2])  # Each task, for both families.
  assert zero_shot[2].startswith("| chance | | 0.500 | 0.500 | 0.500 | 0.250 |")
  assert len(zero_shot) == 6 and all(len(re.findall(r"\| 0\.\d{3}", row)) == 4 for row in zero_shot[3:])
  assert all(len(re.findall(gain, row)) == 3 for row in probes)  # Two probes and fine-tuning.
  text = " ".join(open(out + ".md").read().split())  # Prose is wrapped.
  assert "python tools/compare_objectives.py --objectives=clm,span_corruption" in text
  assert "losses of different objectives are not comparable" in text
  assert "**same-document probe**: above their own initial parameters:" in text
  assert "**pairs: swap**: above their own initial parameters:" in text and "Above the trigram" in text
  assert "CLM yardstick bits per byte, below the unigram" in text
  printed = capsys.readouterr().out
  assert re.search(r"\[1/2\] clm +seed 1 .* val loss \d", printed) and re.search(r"\[2/2\] span_corruption", printed)
  log = tmp_path / "runs" / "clm" / "seed1" / "train.log"
  trained = os.path.getmtime(log)
  compare_objectives.main(argv)  # Finished runs are read back, not trained again.
  assert os.path.getmtime(log) == trained and _tables(out + ".md")[1] == pretraining


def test_scaling_writes_plot_and_table(tmp_path, cache_dir, vocabulary, monkeypatch):
  """Each size a pretrain sweep over the seeds; a rerun reads the finished points back."""
  del vocabulary
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  out = str(tmp_path / "scaling")
  argv = ["--ladder=16x1,32x1", "--head_dim=16", f"--out={out}", f"--out_dir={tmp_path / 'runs'}", "--steps=10",
          "--evals=2", "--seeds=0,1", *TINY]
  scaling.main(argv)
  assert os.path.getsize(out + ".png") > 0
  rows = _tables(out + ".md")[0]
  assert [row.split("|")[1].strip() for row in rows] == ["16x1", "32x1", *(f"{n} (counts, {how})" for n, how in (
      ("unigram", "add-one"), ("bigram", "interpolated Kneser-Ney"), ("trigram", "interpolated Kneser-Ney")))]
  assert all(re.search(r"\| 2 \| \d\.\d{3} \+- \d\.\d{3} \(\d\.\d\d\)", row) for row in rows[:2])
  text = " ".join(open(out + ".md").read().split())
  assert "No fit: fit_power_law needs points at 3 or more distinct sizes" in text
  assert f"pretrain sweep --workdir={tmp_path / 'runs' / '16x1'}" in text and "--grid.train.seed=0,1" in text
  log = tmp_path / "runs" / "16x1" / "seed=1" / "train.log"
  trained = os.path.getmtime(log)
  scaling.main(argv)
  assert os.path.getmtime(log) == trained


def test_scaling_report_with_a_fit(tmp_path):
  """The fitting, plotting and writing half of the tool, on made-up runs of two seeds (no training)."""
  n = np.array([1e4, 1e5, 4e5, 1e6])
  ladder = [[{"size": f"{i}x1", "heads": "1 x 16", "non_embedding_params": int(x), "params": int(x) + 1000,
              "seed": seed, "loss": scaling.power_law(x, 1e5, 0.5, 2.0) + noise, "initial_loss": 8.3,
              "final_eval": {"bits_per_byte": 2.0}, "tokens_per_second": 1000.0,
              "curve": [(0, 8.3), (100, 2.5)]} for seed, noise in ((0, 0.01 * (-1) ** i), (1, 0.005 * i))]
            for i, x in enumerate(n)]
  args = argparse.Namespace(out=str(tmp_path / "scaling"), steps=3, batch_size=4, seq_len=64, seeds="0,1")
  reference = {"bigram (counts)": {"loss": 4.0, "bits_per_byte": 2.1}}
  scaling.write_outputs(ladder, args, ["--steps=3"], "2 CPU cores", reference, ["--workdir=w --grid.train.seed=0,1"])
  text = " ".join(open(args.out + ".md").read().split())
  nc, alpha, l_inf = (float(x) for x in re.search(r"Nc = (\S+), alpha = (\S+), L_inf = (\S+) ", text).groups())
  assert 0.4 < alpha < 0.6 and 1.9 < l_inf < 2.1 and nc > 0
  assert re.search(r"Each seed's ladder fitted alone \(2 of 2 seeds\): alpha 0\.\d{3} \+- \d", text), text
  assert len(_tables(args.out + ".md")[0]) == 5 and os.path.getsize(args.out + ".png") > 0


def test_web_defects_are_put_in_at_their_rates_with_labels(corpus_source):
  documents = list(itertools.islice(corpus_source.texts("train"), 400))
  mix = web_defects.inject(documents, seed=3)
  assert mix == web_defects.inject(documents, seed=3)  # Deterministic.
  labels = collections.Counter(label for _, label in mix)
  for defect, share in {**web_defects.IN_PLACE, **web_defects.ADDED}.items():
    assert labels[defect] == round(share * 400), defect
  texts = [text for text, _ in mix]
  by_label = collections.defaultdict(list)
  for text, label in mix:
    by_label[label].append(text)
  assert all(t in documents for t in by_label["clean"])
  assert all(t not in documents for label in web_defects.IN_PLACE for t in by_label[label])
  assert all("\u00e2\u20ac" in t or "\u00c3" in t for t in by_label["mojibake"])  # UTF-8 read as cp1252.
  assert all(any(line in web_defects.NAVIGATION for line in t.splitlines()) for t in by_label["boilerplate"])
  for label in ("duplicate", "near_duplicate"):  # Each copy comes after its source, where the source is unchanged.
    for text in by_label[label]:
      source = max(documents, key=lambda d: dedup.jaccard(text, d))
      assert dedup.jaccard(text, source) > 0.5, label
      position = len(texts) - 1 - texts[::-1].index(text)
      if source in by_label["clean"]:
        assert texts.index(source) < position, label
  assert all(set(t.replace(",", "").split()) <= set(web_defects.SPAM_WORDS) for t in by_label["spam"])


def test_data_quality_writes_tables_and_plot(tmp_path, cache_dir, vocabulary, monkeypatch, capsys):
  del vocabulary
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  out = str(tmp_path / "docs" / "data_quality")
  data_quality.main(["--d_model=32", "--num_layers=1", "--head_dim=16", f"--out={out}",
                     f"--out_dir={tmp_path / 'runs'}", "--documents=300", "--steps=10", "--evals=2", "--seeds=0,1",
                     *TINY])
  assert os.path.getsize(out + ".png") > 0
  text = open(out + ".md").read()
  rows = _tables(out + ".md")[0]
  assert [row.split("|")[1].strip() for row in rows[:4]] == ["clean", "defective", "curated",
                                                            "unigram (counts, add-one) of the clean documents"]
  assert all(re.search(r"\| 2 \| \d\.\d{3} \+- \d\.\d{3} \(\d\.\d\d\)", row) for row in rows[:3])
  assert re.search(r"curation takes back -?\d+\.\d\d( \+- \d+\.\d\d)? \(the share per seed", " ".join(text.split()))
  # Every rung's final parameters on the clean validation rows: for the clean rung, its own last evaluation's.
  own = [[json.loads(line) for line in open(tmp_path / "runs" / rung / f"seed={seed}" / "metrics.jsonl")
          if "eval/loss" in line][-1]["eval/loss"] for rung in ("clean", "curated") for seed in (0, 1)]
  table = [float(re.search(r"\| 2 \| (\d\.\d{3}) \+-", row).group(1)) for row in rows[:3]]
  assert table[0] == pytest.approx(np.mean(own[:2]), abs=6e-4)
  assert "every rung's final parameters on the same uncurated rows" in " ".join(text.split())
  spam = round(web_defects.ADDED["spam"] * 300)
  assert f"| spam | {spam} | {spam} | 100.0% |" in text  # Keyword spam has no stop words.
  assert "| encoding_errors | " in text and "| near_duplicate | " in text
  printed = capsys.readouterr().out
  assert re.search(r"\[3/3\] curated .* val loss \d", printed)
  # The curated rung's files, read by the run through the stage, and its record in the workdir.
  report = json.loads(open(tmp_path / "runs" / "curated" / "seed=1" / "data_curation.json").read())
  mix = round(300 * (1 + sum(web_defects.ADDED.values())))
  assert report["files"]["train"]["documents"] == mix and report["files"]["train"]["kept"] <= mix / 2
  assert report["files"]["train"]["removed"]["stop_words"]["tokens"] > 0


def test_curriculum_length_warmup_arm_ramps_the_rows():
  args = argparse.Namespace(steps=100, seq_len=64, batch_size=4, evals=2, d_model=32, num_layers=1, head_dim=16,
                            switch=0.5, ul2r=0.2)
  cfg = curriculum.arm_config(configs.load("quickstart"), "clm_length_warmup", args)
  assert cfg.data.objective == "clm" and cfg.data.length_schedule == ((0, 16), (10, 32), (20, 64))
  assert curriculum.describe("clm_length_warmup", args) == "CLM, rows of 16 then 32 tokens until steps 10 and 20"


def test_curriculum_writes_table_verdicts_and_plot(tmp_path, cache_dir, vocabulary, monkeypatch, capsys):
  del vocabulary
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  out = str(tmp_path / "docs" / "curriculum")
  # One arm: the table's code is the same for each (the length warmup itself: tests/test_schedule.py).
  curriculum.main(["--arms=clm_then_ul2", "--d_model=32", "--num_layers=1", "--head_dim=16",
                   f"--out={out}", f"--out_dir={tmp_path / 'runs'}", "--seeds=0", "--probe_seeds=2",
                   "--steps=10", "--batch_size=4", "--seq_len=64", "--evals=2", "--config.train.eval_batches=2"])
  assert os.path.getsize(out + ".png") > 0
  rows = _table_rows(out + ".md")
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


def test_compare_tokenizers_writes_table_and_plot(tmp_path, cache_dir, monkeypatch, capsys):
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  out = str(tmp_path / "docs" / "tokenizers")
  compare_tokenizers.main(["--kinds=bytes", "--row_bytes=64", "--seeds=0",
                           "--d_model=32", "--num_layers=1", "--head_dim=16", "--steps=4", "--batch_size=4",
                           "--evals=2", f"--out={out}", f"--out_dir={tmp_path / 'runs'}",
                           "--config.train.eval_batches=2"])
  assert os.path.getsize(out + ".png") > 0
  rows = {row.split("|")[1].strip(): [c.strip() for c in row.split("|")[2:-1]] for row in _table_rows(out + ".md")}
  assert list(rows) == ["bytes"]  # The kinds that learn a vocabulary: tests/test_tokenizer_kinds.py.
  # ids, row tokens, bytes/token: a byte per token, so rows of --row_bytes tokens.
  assert rows["bytes"][:3] == ["366", "64", "1.00"]
  assert all(re.fullmatch(r"\d\.\d{3}", row[-4]) and re.fullmatch(r"\d\.\d{3}", row[-3]) for row in rows.values())
  assert all(re.fullmatch(r"\d\.\d{3}, \d\.\d{3}", row[-2]) for row in rows.values())  # The count models.
  assert "A difference counts as real" in open(out + ".md").read()
  assert re.search(r"\[seed 0\] bytes +val bits/byte \d", capsys.readouterr().out)


def test_compare_moe_gives_both_models_the_same_active_parameters_and_refuses_bad_flags(capsys):
  """Its runs' configs (the training itself is the other experiments' and test_moe.py's): the dense model and its
  MoE twin multiply the same parameters per token, the MoE holding more."""
  from pretrain import cli, run as run_lib  # pylint: disable=g-import-not-at-top
  from pretrain.train import flops  # pylint: disable=g-import-not-at-top
  base = cli.parse_command_line(argparse.ArgumentParser(), ["--config=configs/quickstart.py"])[1]
  args = argparse.Namespace(seq_len=64, steps=3, batch_size=4, evals=3, d_model=32, num_layers=1, head_dim=16,
                            experts=8, top_k=2)
  for family in compare_moe.FAMILIES:
    counts = {}
    for model in compare_moe.MODELS:
      cfg = compare_moe.run_config(base, family, model, args)
      params = run_lib.Run.build(cfg, 128).abstract_state().params
      counts[model] = (flops.active_parameters(params, cfg.model), sum(x.size for x in jax.tree.leaves(params)))
    router = 32 * 8 * (1 if family == "decoder_only" else 2)  # d_model x experts, per MoE layer
    assert counts["moe"][0] - counts["dense"][0] == router and counts["moe"][1] > counts["dense"][1]
  with pytest.raises(SystemExit):
    compare_moe.main(["--experts=2", "--top_k=3"])
  assert "--top_k=3 is more than --experts=2" in capsys.readouterr().err
