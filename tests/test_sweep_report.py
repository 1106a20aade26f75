"""The sweep's report from its points' final metrics (pretrain/experiments/sweep_report.py), without training."""

import json

from pretrain.experiments import sweep_report


def _report(tmp_path, grid: dict, points: list[dict]) -> str:
  (tmp_path / "sweep.json").write_text(json.dumps({"base": [], "grid": grid}))
  sweep_report.report(str(tmp_path), points, "eval/loss", "pretrain sweep ...")
  return " ".join((tmp_path / "sweep.md").read_text().split())  # Prose is wrapped at 100 columns.


def test_one_run_per_setting_claims_no_interval(tmp_path):
  rates = ["1e-4", "1e-3", "1e-2", "1e-1"]
  points = [{"name": f"learning_rate={r}", "settings": {"optimizer.learning_rate": r},
             "values": {"eval/loss": 3.0 + i}} for i, r in enumerate(rates)]
  text = _report(tmp_path, {"optimizer.learning_rate": rates}, points)
  assert "95%" not in text and "within the runs' spread" not in text
  assert "one run per setting, so no interval and no difference that can be called real" in text
  assert (tmp_path / "sweep.png").stat().st_size > 0


def test_runs_over_seeds_have_their_interval(tmp_path):
  points = [{"name": f"learning_rate={r},seed={s}", "settings": {"optimizer.learning_rate": r, "train.seed": s},
             "values": {"eval/loss": 3.0 + float(r) * 100 + 0.01 * int(s)}}
            for r in ("1e-3", "1e-2") for s in ("0", "1", "2")]
  text = _report(tmp_path, {"optimizer.learning_rate": ["1e-3", "1e-2"], "train.seed": ["0", "1", "2"]}, points)
  assert "the mean +- the 95% interval (Student's t) over the runs" in text and "| 3 |" in text
