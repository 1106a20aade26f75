"""pretrain eval on a trained run."""

import json
import os
import subprocess
import sys

from pretrain.train import metrics
from tests.conftest import REPO


def test_evaluate_matches_the_training_evaluation_and_names_bad_tasks(trained_run, cache_dir):
  workdir = trained_run
  env = {**os.environ, "PRETRAIN_CACHE": cache_dir}
  evaluate = lambda *args: subprocess.run([sys.executable, "-m", "pretrain", "eval", f"--workdir={workdir}", *args],
                                          cwd=REPO, capture_output=True, text=True, env=env)
  result = evaluate("--task=corpus_clm", "--batches=3")
  assert result.returncode == 0, result.stderr
  saved = json.load(open(workdir / "eval" / "corpus_clm-validation-step3.json"))
  logged = [r for r in metrics.read(str(workdir)) if r["step"] == 3 and "eval/loss" in r][0]
  assert abs(saved["loss"] - logged["eval/loss"]) < 1e-5 and saved["batches"] == 3
  assert f"perplexity {saved['perplexity']:.2f}" in result.stdout
  other = evaluate("--task=corpus_prefix_lm_decoder", "--batches=2")
  assert other.returncode == 0, other.stderr
  bad = evaluate("--task=corpus_span_corruption")
  assert bad.returncode == 2 and "not a task this llama run can be evaluated on" in bad.stderr
  assert "corpus_clm" in bad.stderr
