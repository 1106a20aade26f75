"""`pretrain experiment compare_objectives`: its runs' configs, the rate choice, and a tiny run of the whole page."""

import argparse
import json
import os
import re

import pytest

from pretrain import configs
from pretrain.experiments import compare_objectives
from pretrain.system.errors import UserError
from tests.experiments import pages


@pytest.mark.slow
def test_a_rate_chosen_at_the_grids_edge_extends_the_grid_until_bracketed():
  assert compare_objectives.beyond_edge({1e-3: [4.0], 3e-3: [3.9], 1e-2: [3.8]}) == 3.33e-2  # The grid's ratio.
  assert compare_objectives.beyond_edge({1e-3: [3.7, 3.7], 3e-3: [3.9, 3.8], 1e-2: [3.8, 3.9]}) == 3.33e-4
  assert compare_objectives.beyond_edge({1e-3: [4.0], 3e-3: [3.7], 1e-2: [3.8]}) is None  # Bracketed.
  assert compare_objectives.beyond_edge({1e-3: [4.0]}) is None


def test_a_rate_chosen_on_a_reported_seed_is_refused_before_any_run(tmp_path, capsys):
  with pytest.raises(SystemExit):
    compare_objectives.main(["--objectives=clm", "--seeds=0,1", "--other_seeds=0", "--lr_seeds=1",
                             f"--out_dir={tmp_path}"])
  assert "--lr_seeds=1 shares seeds with the reported runs" in capsys.readouterr().err
  assert not os.listdir(tmp_path)


@pytest.mark.slow
def test_split_row_fits_each_objective():
  data = configs.load("quickstart").data
  assert compare_objectives.split_row("span_corruption", data, 100, 128) == (104, 24)  # T5's 512:114, scaled.
  assert compare_objectives.split_row("ul2", data, 100, 128) == (64, 64)
  assert compare_objectives.split_row("prefix_lm_decoder", data, 100, 128) == (64, 64)
  assert compare_objectives.split_row("mass", data, 100, 128) == (64, 64)  # Segments of 63, fragments of 32.
  with pytest.raises(UserError, match="no split of a row of --seq_len=6 tokens"):
    compare_objectives.split_row("ul2", data, 100, 6)


@pytest.mark.slow
def test_contrastive_runs_with_its_dropout_and_the_others_without():
  base = configs.load("quickstart")
  args = argparse.Namespace(seq_len=128, steps=10, batch_size=16, evals=2, d_model=128, num_layers=2, head_dim=64,
                            num_heads=0, mlp_dim=0, enc_dec_layers=0)
  dropouts = {name: compare_objectives.run_config(base, name, args).model.dropout
              for name in compare_objectives.DEFAULT_OBJECTIVES.split(",")}
  assert dropouts.pop("contrastive") == 0.1 and set(dropouts.values()) == {0.0}


@pytest.mark.slow
@pytest.mark.extended  # The whole page: see tests/conftest.py.
def test_compare_objectives_writes_curves_and_tables(tmp_path, cache_dir, vocabulary, monkeypatch, capsys):
  del vocabulary  # Built first, so the runs reuse it.
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  out = str(tmp_path / "docs" / "objectives")
  argv = ["--objectives=clm,span_corruption", "--d_model=32", "--num_layers=1", "--head_dim=16", f"--out={out}",
          f"--out_dir={tmp_path / 'runs'}", "--probe_documents=100", "--seeds=0,1", "--probe_seeds=2",
          "--zero_shot_items=40",
          "--finetune_seeds=1", "--finetune_steps=2", "--steps=10", "--evals=2", "--lr_grid=1e-3,1e-2",
          "--lr_seeds=7", "--lr_extend=1", *pages.TINY]
  compare_objectives.main(argv)
  assert os.path.getsize(out + ".png") > 0
  rates, pretraining, zero_shot, probes = pages.tables(out + ".md")
  # Each objective's rate chosen on seed 7 (none of the reported runs'), its reported runs at that rate. Two rates
  # put the lower loss at an edge, so each went one rate past it (--lr_extend=1) and chose among three.
  chosen = {}
  header = [cell.strip() for cell in open(out + ".md").read().split("| objective | ")[1].split("\n")[0].split("|")]
  grid = [float(cell.split()[1]) for cell in header[:-2]]
  for row in rates:
    name, *losses, rate = (cell.strip() for cell in row.strip("|").split("|"))
    tried = {g: float(loss) for g, loss in zip(grid, losses) if loss}
    assert len(tried) == 3 and {1e-3, 1e-2} < set(tried) and set(tried) <= {1e-4, 1e-3, 1e-2, 1e-1}
    chosen[name] = rate.split()[0]
    assert float(chosen[name]) == min(tried, key=tried.get)
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
  # The tasks whose texts fit each model's rows (64 tokens; span corruption's 51 + 13), span corruption's in
  # both forms; the others not scored (n/a), said why below the table; pairs: lines, which neither scores, has no
  # column.
  assert [len(re.findall(gain, row)) for row in zero_shot[:2]] == [3, 3] and zero_shot[0].count("n/a") == 2
  assert zero_shot[2].startswith("| chance | | 0.500 | 0.500 | 0.250 | 0.500 | 0.500 |")
  assert len(zero_shot) == 6 and all(len(re.findall(r"\| 0\.\d{3}", row)) == 3 for row in zero_shot[3:])
  assert all(len(re.findall(gain, row)) == 3 for row in probes)  # Two probes and fine-tuning.
  text = " ".join(open(out + ".md").read().split())  # Prose is wrapped.
  assert "pretrain experiment compare_objectives --objectives=clm,span_corruption" in text
  assert "losses of different objectives are not comparable" in text
  assert re.search(r"clm scores no pairs: lines \(n/a\): \d+ of 80 requests give the model's decoder up to \d+ "
                   r"tokens, more than the 64 positions it trained at", text)
  assert "sampling error (at an accuracy near 0.8: +- 0.12 on the 40 items of pairs: swap," in text
  # Each task's own count, up to --zero_shot_items.
  assert "+- 0.07 on the 134 items of pairs: lines" in compare_objectives.item_error(150)
  assert "**same-document probe**: above their own initial parameters:" in text
  assert "**pairs: swap**: above their own initial parameters:" in text and "Above the trigram" in text
  assert "CLM yardstick bits per byte, below the unigram" in text
  printed = capsys.readouterr().out
  assert re.search(r"\[1/2\] clm +seed 1 .* val loss \d", printed) and re.search(r"\[2/2\] span_corruption", printed)
  log = tmp_path / "runs" / "clm" / "seed1" / "train.log"
  trained = os.path.getmtime(log)
  compare_objectives.main(argv)  # Finished runs are read back, not trained again.
  assert os.path.getmtime(log) == trained and pages.tables(out + ".md")[1] == pretraining
  # No grid: the config's rate for every objective, said on the page (CLM's runs at its chosen rate, read back).
  compare_objectives.main([*(a for a in argv if not a.startswith(("--objectives=", "--lr_"))), "--objectives=clm",
                           "--lr_grid=", f"--config.optimizer.learning_rate={chosen['clm']}"])
  assert os.path.getmtime(log) == trained
  assert f"every objective at the config's peak learning rate, {float(chosen['clm']):g} (--lr_grid= " in " ".join(
      open(out + ".md").read().split())
