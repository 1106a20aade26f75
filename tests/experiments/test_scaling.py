"""`pretrain experiment scaling`: a tiny run of its page, and the page's fits written from made-up runs (the fits
themselves: tests/experiments/test_scaling_laws.py)."""

import argparse
import json
import os
import re

import numpy as np
import pytest

from pretrain.experiments import budgets
from pretrain.experiments import isoflop
from pretrain.experiments import parametric_fit
from pretrain.experiments import scaling
from pretrain.experiments import scaling_report
from tests.experiments import pages


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
  plan, losses, bits, counts, optima = pages.tables(out + ".md")
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
  assert os.path.getmtime(log) == trained and pages.tables(out + ".md")[1] == losses


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
  optima = pages.tables(args.out + ".md")[4]
  assert [row.split("|")[1].strip() for row in optima] == ["1e+15", "2e+15", "4e+15"]
  assert all(row.rstrip(" |").endswith("3 of 3 seeds") for row in optima)  # Each minimum inside the sizes.
  fitted = {row.split("|")[1].strip(): row for row in pages.tables(args.out + ".md")[5]}
  assert set(fitted) == {"E", "A", "B", "alpha", "beta", "a = beta / (alpha + beta)"}
  assert "| 0.348 |" in fitted["alpha"] and "| 0.513 |" in fitted["a = beta / (alpha + beta)"]  # Published.
  assert "0 of 54 runs read it more than 4 times" in text and "Chinchilla" in text
  assert "lie beyond the widths measured" in text and "the depths differ" not in text
  assert os.path.getsize(args.out + ".png") > 0
