"""pretrain.experiments (`pretrain experiment compare_objectives`, `... scaling`, `... cooldown_check`, ...): a
tiny run of each experiment, and the scaling page's fits written from made-up runs (the fits themselves:
tests/experiments/test_scaling_laws.py)."""

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
from pretrain.experiments import cooldown_check
from pretrain.experiments import curriculum
from pretrain.experiments import data_quality
from pretrain.experiments import budgets
from pretrain.experiments import isoflop
from pretrain.experiments import parametric_fit
from pretrain.experiments import scaling
from pretrain.experiments import scaling_report
from pretrain.experiments import web_defects
from pretrain.system.errors import UserError

# A model and budget small enough for a CPU test: a few seconds of training per run.
TINY = ["--steps=3", "--batch_size=4", "--seq_len=64", "--evals=3", "--config.train.eval_batches=2"]


@pytest.mark.slow
def test_saved_figures_stay_filed_under_their_config_when_a_field_is_added():
  """A result saved before optimizer.muon_dtype existed (the field absent) is the same run's for AdamW, whose
  step does not read it, and another run's for Muon, whose saved run iterated in float32 (the field's older value)
  where today's default is bfloat16. Any other difference is another run."""
  from pretrain.experiments import runs  # pylint: disable=g-import-not-at-top
  for name, same in (("adamw", True), ("muon", False)):
    cfg = configs.load("quickstart")
    cfg.optimizer.name = name
    today = json.loads(cfg.to_json_best_effort())
    saved = json.loads(cfg.to_json_best_effort())
    del saved["optimizer"]["muon_dtype"]
    assert (runs.config_key(saved) == runs.config_key(today)) == same, name
    saved["train"]["steps"] += 1
    assert runs.config_key(saved) != runs.config_key(today)


@pytest.mark.slow
def test_a_rate_chosen_at_the_grids_edge_extends_the_grid_until_bracketed():
  assert compare_objectives.beyond_edge({1e-3: [4.0], 3e-3: [3.9], 1e-2: [3.8]}) == 3.33e-2  # The grid's ratio.
  assert compare_objectives.beyond_edge({1e-3: [3.7, 3.7], 3e-3: [3.9, 3.8], 1e-2: [3.8, 3.9]}) == 3.33e-4
  assert compare_objectives.beyond_edge({1e-3: [4.0], 3e-3: [3.7], 1e-2: [3.8]}) is None  # Bracketed.
  assert compare_objectives.beyond_edge({1e-3: [4.0]}) is None


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
def test_budgets_and_fractions_that_name_one_run_twice_or_none_are_refused():
  from pretrain.experiments import runs  # pylint: disable=g-import-not-at-top
  with pytest.raises(UserError, match="give one or more distinct seeds from 0"):  # Before seed 0 trains.
    runs.seeds("0,-1")
  for text in ("inf", "1e12,inf", "nan"):
    with pytest.raises(UserError, match="give distinct positive FLOP counts"):
      scaling.parse_budgets(text)
  assert [a["name"] for a in cooldown_check.arms(1000, [0.1, 0.104], ["1-sqrt"])] == ["wsd_10_1-sqrt", "wsd_10.4_1-sqrt"]
  with pytest.raises(UserError, match="--fractions 0.1 and 0.104 both decay over 1 of the 10 steps"):
    cooldown_check.arms(10, [0.1, 0.104], ["1-sqrt"])


@pytest.mark.slow
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


@pytest.mark.slow
def test_compare_objectives_writes_curves_and_tables(tmp_path, cache_dir, vocabulary, monkeypatch, capsys):
  del vocabulary  # Built first, so the runs reuse it.
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  out = str(tmp_path / "docs" / "objectives")
  argv = ["--objectives=clm,span_corruption", "--d_model=32", "--num_layers=1", "--head_dim=16", f"--out={out}",
          f"--out_dir={tmp_path / 'runs'}", "--probe_documents=100", "--seeds=0,1", "--probe_seeds=2",
          "--zero_shot_items=150",
          "--finetune_seeds=1", "--finetune_steps=2", "--steps=10", "--evals=2", "--lr_grid=1e-3,1e-2",
          "--lr_seeds=7", "--lr_extend=1", *TINY]
  compare_objectives.main(argv)
  assert os.path.getsize(out + ".png") > 0
  rates, pretraining, zero_shot, probes = _tables(out + ".md")
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
  # Each task for both families, and span corruption's masked-span form of the three pair tasks.
  assert [len(re.findall(gain, row)) for row in zero_shot[:2]] == [4, 7] and zero_shot[0].count("n/a") == 3
  assert zero_shot[2].startswith("| chance | | 0.500 | 0.500 | 0.500 | 0.250 |")
  assert len(zero_shot) == 6 and all(len(re.findall(r"\| 0\.\d{3}", row)) == 4 for row in zero_shot[3:])
  assert all(len(re.findall(gain, row)) == 3 for row in probes)  # Two probes and fine-tuning.
  text = " ".join(open(out + ".md").read().split())  # Prose is wrapped.
  assert "pretrain experiment compare_objectives --objectives=clm,span_corruption" in text
  assert "losses of different objectives are not comparable" in text
  assert "sampling error (at an accuracy near 0.8: +- 0.06 on the 150 items of pairs: swap," in text
  assert "+- 0.07 on the 134 items of pairs: lines" in text  # Each task's own count (up to --zero_shot_items).
  assert "**same-document probe**: above their own initial parameters:" in text
  assert "**pairs: swap**: above their own initial parameters:" in text and "Above the trigram" in text
  assert "CLM yardstick bits per byte, below the unigram" in text
  printed = capsys.readouterr().out
  assert re.search(r"\[1/2\] clm +seed 1 .* val loss \d", printed) and re.search(r"\[2/2\] span_corruption", printed)
  log = tmp_path / "runs" / "clm" / "seed1" / "train.log"
  trained = os.path.getmtime(log)
  compare_objectives.main(argv)  # Finished runs are read back, not trained again.
  assert os.path.getmtime(log) == trained and _tables(out + ".md")[1] == pretraining


@pytest.mark.slow
def test_scaling_writes_its_page_and_reads_finished_runs_back(tmp_path, cache_dir, vocabulary, monkeypatch):
  """Per size a wsd run to the largest budget (a pretrain sweep over the seeds) and a cooldown branch per smaller
  budget, each spending its budget to within half a step; a rerun trains nothing."""
  del vocabulary
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  out, out_dir = str(tmp_path / "scaling"), tmp_path / "runs"
  argv = ["--ladder=16x1,32x1", "--head_dim=16", "--budgets=1e9,2e9", "--seeds=0", "--warmup_steps=2",
          "--tokens_per_parameter=0,100", "--batch_size=4", "--seq_len=32", "--evals=2", f"--out={out}",
          f"--out_dir={out_dir}", "--config.train.eval_batches=2"]
  scaling.main(argv)
  assert os.path.getsize(out + ".png") > 0
  plan, losses, bits, counts, optima = _tables(out + ".md")
  assert [row.split("|")[1].strip() for row in plan] == ["16x1", "32x1"]
  # Each budget's steps at the size's FLOPs per step (budgets.branch: within half a step), as the runs trained them.
  planned = [int(x.replace(",", "")) for x in re.findall(r"\| ([\d,]+), \d+\.\d, ", plan[0])]
  parent = json.load(open(out_dir / "16x1" / "stable" / "seed=0" / "config.json"))
  branch = json.load(open(out_dir / "16x1" / "C=1e+09" / "seed=0" / "config.json"))
  assert planned == [branch["train"]["steps"], parent["train"]["steps"]]
  per_token = float(re.search(r"\| (\d\.\d\d) \(\d+%\) \|", plan[0]).group(1)) * 1e6
  assert abs(planned[0] * per_token * 4 * 32 - 1e9) < per_token * 4 * 32
  assert all(re.search(r"\| \d\.\d{3} \| \d\.\d{3} \| \d\.\d{3} \|$", row) for row in losses + bits)
  assert [row.split("|")[1].strip() for row in counts][0] == "unigram (counts, add-one)"
  text = " ".join(open(out + ".md").read().split())
  assert "No frontier: no seed has a minimum at two budgets or more" in text  # Two sizes: no parabola.
  assert "No parametric fit: fit needs 5 runs or more" in text
  assert "## What a fit at this scale can and cannot tell" in text and "pretrain experiment scaling --ladder=16x1" in text
  assert "16x1, 32x1 lie below the base width, where muP's rule runs the other way, unmeasured here" in text
  assert parent["optimizer"]["schedule"] == "wsd" and parent["model"]["parameterization"] == "mup"
  assert branch["train"]["parent_step"] in parent["train"]["keep_steps"]
  assert branch["train"]["steps"] - branch["train"]["parent_step"] == branch["optimizer"]["decay_steps"]
  log = out_dir / "16x1" / "C=1e+09" / "seed=0" / "train.log"
  trained = os.path.getmtime(log)
  scaling.main(argv)
  assert os.path.getmtime(log) == trained and _tables(out + ".md")[1] == losses


@pytest.mark.slow
def test_scaling_page_with_fits(tmp_path):
  """The page's half of the tool on made-up runs of a known L(N, D) (no training): the IsoFLOP table, the
  frontier's exponent over seeds, the parametric fit beside the published one, the figures."""
  law = parametric_fit.Law(**parametric_fit.PUBLISHED)
  sizes, budget_list = np.geomspace(6e5, 1.92e7, 6), [1e15, 2e15, 4e15]  # Optima 2.3M to 4.8M.
  ladder = []
  for n in sizes:
    model = budgets.Model(step_flops=6 * n * 1000, tokens_per_step=1000, n=n, non_embedding=int(n / 2),
                          params=int(n * 1.5))
    plan = budgets.plan(budget_list, model, 0.2, warmup_steps=2)
    ladder.append({"size": f"{int(n)}", "d_model": int(n ** 0.5 / 8), "layers": 2, "heads": "1 x 16", "model": model,
                   "plan": plan, "end_lr_ratio": 0.1})
  rng = np.random.default_rng(0)
  records = []
  for seed in (0, 1, 2):
    for rung in ladder:
      for b in [rung["plan"].parent, *rung["plan"].branches]:
        tokens = b.steps * 1000
        loss = float(law.loss(rung["model"].n, tokens) * np.exp(rng.normal(0, 0.002)))
        records.append({"size": rung["size"], "seed": seed, "budget": b.budget, "steps": b.steps, "flops": b.flops,
                        "tokens": tokens, "epochs": tokens / 1e10, "n": rung["model"].n, "loss": loss,
                        "bits_per_byte": loss / 2, "initial_loss": 8.3, "initial_bits_per_byte": 4.15,
                        "curve": [(0, 8.3), (tokens / 2, loss + 0.1), (tokens, loss)], "tokens_per_second": 1e4})
  fit = isoflop.fit(records)
  found = parametric_fit.bootstrap([r["n"] for r in records], [r["tokens"] for r in records],
                                   [r["loss"] for r in records], resamples=10, refine=1,
                                   starts=parametric_fit.GRID[::149])
  args = argparse.Namespace(out=str(tmp_path / "scaling"), ladder="a,b", head_dim=16, base_width=64,
                            learning_rate=1e-2, batch_size=4, seq_len=250, warmup_steps=2, seeds="0,1,2",
                            cooldown=0.2, tokens_per_parameter=(0.0, 100.0))
  reference = {"bigram (counts)": {"loss": 4.0, "bits_per_byte": 2.1}}
  scaling_report.write(args, ["--seeds=0,1,2"], "2 CPU cores", ladder, budget_list, records, fit, found, reference,
                       ["pretrain sweep --workdir=w", "pretrain cooldown --workdir=w"], int(1e7), 60.0)
  text = " ".join(open(args.out + ".md").read().split())
  a, half = (float(x) for x in re.search(r"N_opt ~ C\^a with a = (\d\.\d\d) \+- (\d\.\d\d)", text).groups())
  assert abs(a - law.n_exponent) <= half + 0.02
  optima = _tables(args.out + ".md")[4]
  assert [row.split("|")[1].strip() for row in optima] == ["1e+15", "2e+15", "4e+15"]
  assert all(row.rstrip(" |").endswith("3 of 3 seeds") for row in optima)  # Each minimum inside the sizes.
  fitted = {row.split("|")[1].strip(): row for row in _tables(args.out + ".md")[5]}
  assert set(fitted) == {"E", "A", "B", "alpha", "beta", "a = beta / (alpha + beta)"}
  assert "| 0.348 |" in fitted["alpha"] and "| 0.513 |" in fitted["a = beta / (alpha + beta)"]  # Published.
  assert "0 of 54 runs read it more than 4 times" in text and "Chinchilla" in text
  assert "lie beyond the widths measured" in text and "the depths differ" not in text
  assert os.path.getsize(args.out + ".png") > 0


@pytest.mark.slow
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
  rows = _tables(out + ".md")[0]
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
  from pretrain.downstream import stats  # pylint: disable=g-import-not-at-top
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_compare_tokenizers_writes_table_and_plot(tmp_path, cache_dir, monkeypatch, capsys):
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  out = str(tmp_path / "docs" / "tokenizers")
  compare_tokenizers.main(["--kinds=bytes", "--row_bytes=64", "--seeds=0",
                           "--d_model=32", "--num_layers=1", "--head_dim=16", "--steps=4", "--batch_size=4",
                           "--evals=2", f"--out={out}", f"--out_dir={tmp_path / 'runs'}",
                           "--config.train.eval_batches=2"])
  assert os.path.getsize(out + ".png") > 0
  rows = {row.split("|")[1].strip(): [c.strip() for c in row.split("|")[2:-1]] for row in _table_rows(out + ".md")}
  assert list(rows) == ["bytes"]  # The kinds that learn a vocabulary: tests/vocab/test_tokenizer_kinds.py.
  # ids, row tokens, bytes/token: a byte per token, so rows of --row_bytes tokens.
  assert rows["bytes"][:3] == ["366", "64", "1.00"]
  assert all(re.fullmatch(r"\d\.\d{3}", row[-4]) and re.fullmatch(r"\d\.\d{3}", row[-3]) for row in rows.values())
  assert all(re.fullmatch(r"\d\.\d{3}, \d\.\d{3}", row[-2]) for row in rows.values())  # The count models.
  assert "A difference counts as real" in open(out + ".md").read()
  assert re.search(r"\[seed 0\] bytes +val bits/byte \d", capsys.readouterr().out)


@pytest.mark.slow
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


@pytest.mark.slow
def test_mup_transfer_says_a_shift_held_back_by_holm_is_not_shown_rather_than_absent():
  """An optimum that moves by its own interval but not after Holm's correction over the page's list is not
  reported as 'does not move'; one whose spread hides it names the smallest shift the seeds could find."""
  from pretrain.experiments import mup_transfer  # pylint: disable=g-import-not-at-top
  lrs = [2.0 ** -10, 2.0 ** -8, 2.0 ** -6, 2.0 ** -4]
  optima = {("decoder_only", "standard"): ([-8, -8, -8.1], [-8.2, -8.45, -8.3]),  # p 0.043: apart alone.
            ("decoder_only", "mup"): ([-8, -6, -8], [-6, -8, -8])}  # Hidden in the spread.
  rows = [{"family": family, "parameterization": parameterization, "width": width, "optima": values}
          for (family, parameterization), ends in optima.items() for width, values in zip((64, 256), ends)]
  standard, mup = mup_transfer.shifts(rows, [64, 256], lrs)
  assert "apart by its own interval, not after Holm's correction: not shown to differ." in standard
  assert "not shown to differ (at this spread the seeds detect only differences of" in mup
  assert "does not move" not in standard + mup
