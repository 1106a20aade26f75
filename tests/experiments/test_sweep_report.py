"""The sweep's report from its points' final metrics (pretrain/experiments/sweep_report.py), without training."""

import json

import pytest

from pretrain.experiments import sweep_report
from pretrain.train import checksums


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


def test_settings_worse_than_their_initial_parameters_are_reported_as_the_better_ones_are(tmp_path):
  """A probe's trained runs against their own initial parameters, both directions: a setting that pre-training
  made worse on the probe is named, not left out."""
  gains = {"0.15": (0.05, 0.052, 0.048), "0.4": (-0.041, -0.044, -0.038)}
  points = [{"name": f"mlm_rate={r},seed={s}", "settings": {"data.mlm_rate": r, "train.seed": str(s)},
             "values": {"eval/loss": 5.0, "probe/same_document_probe": 0.65 + gain + 0.001 * s,
                        "probe/same_document_probe/init": 0.65 + 0.001 * s}}
            for r, seed_gains in gains.items() for s, gain in enumerate(seed_gains)]
  (tmp_path / "sweep.json").write_text(json.dumps({"base": [], "grid": {"data.mlm_rate": list(gains),
                                                                          "train.seed": ["0", "1", "2"]}}))
  sweep_report.report(str(tmp_path), points, "probe/same_document_probe", "pretrain sweep ...")
  text = " ".join((tmp_path / "sweep.md").read_text().split())
  assert "Against their own initial parameters (paired, Holm): better mlm_rate=0.15; worse mlm_rate=0.4." in text


def _seeded(grid: dict, values) -> tuple[dict, list[dict]]:
  """The grid over three seeds, and its points' values (values(setting, seed))."""
  [(key, settings)] = grid.items()
  points = [{"name": f"{key}={v},seed={s}", "settings": {key: v, "train.seed": str(s)}, "values": values(v, s)}
            for v in settings for s in range(3)]
  return {**grid, "train.seed": ["0", "1", "2"]}, points


def test_a_run_s_own_loss_is_not_compared_across_settings_that_change_what_it_measures(tmp_path):
  """MLM's loss at two masking rates is over other tokens, two objectives' over other tasks, a per-token loss over
  two tokenizers' tokens: no verdict, the measure to compare on named; a yardstick, a probe and bits per byte over
  two tokenizers are compared."""
  cases = [({"data.mlm_rate": ["0.15", "0.4"]}, "eval/loss",
            "eval/loss is not compared: data.mlm_rate changes the objective's examples, so its settings measure "
            "different things. Compare them on a measure alike for all: --report --metric=eval/corpus_clm/loss or "
            "probe/same_document_probe."),
           ({"data.objective": ["clm", "prefix_lm_decoder"]}, "eval/loss",
            "data.objective changes the objective's examples, so its settings measure different things. Compare "
            "them on a measure alike for all: --report --metric=eval/corpus_clm/loss or eval/corpus_nsp/loss or "
            "probe/same_document_probe."),
           ({"tokenizer.vocab_size": ["1000", "4000"]}, "eval/loss",
            "eval/loss is not compared: tokenizer.vocab_size changes what a token is"),
           ({"tokenizer.vocab_size": ["1000", "4000"]}, "eval/bits_per_byte", "a difference counts as real where"),
           ({"data.objective": ["clm", "prefix_lm_decoder"]}, "eval/corpus_clm/loss",
            "a difference counts as real where"),
           ({"data.mlm_rate": ["0.15", "0.4"]}, "probe/same_document_probe", "a difference counts as real where"),
           # An eval task whose objective reads the swept setting is not alike either; a schedule's other members
           # leave data.objective's loss as it is.
           ({"data.mlm_rate": ["0.15", "0.4"]}, "eval/corpus_nsp/loss", "data.mlm_rate changes the objective's"),
           ({"data.schedule": ["()", "((0, (('clm', 1.0),)), (5, (('fim', 1.0),)))"]}, "eval/loss",
            "a difference counts as real where")]
  for grid, metric, said in cases:
    [settings] = grid.values()
    grid, points = _seeded(grid, lambda v, s, settings=settings: {  # Settings a level apart, seeds 0.01.
        key: base + settings.index(v) + 0.01 * s for key, base in (
            ("eval/loss", 3.0), ("eval/bits_per_byte", 1.0), ("eval/corpus_clm/loss", 3.0),
            ("eval/corpus_nsp/loss", 4.0), ("probe/same_document_probe", 0.6))})
    (tmp_path / "sweep.json").write_text(json.dumps({"base": [], "grid": grid}))
    sweep_report.report(str(tmp_path), points, metric, "pretrain sweep ...")
    text = " ".join((tmp_path / "sweep.md").read_text().split())
    assert said in text, (grid, metric, text)
    assert ("a difference counts as real where" in text) == (said == "a difference counts as real where"), text


@pytest.mark.slow
def test_a_point_is_finished_only_once_its_final_checkpoint_is_committed(tmp_path, trained_run):
  """A sweep point killed after logging its final evaluation, while its last checkpoint was being written, is not
  finished: the sweep trains it again (from its latest checkpoint) rather than read an earlier one as its end."""
  import shutil  # pylint: disable=g-import-not-at-top
  run = tmp_path / "run"
  shutil.copytree(trained_run, run)
  assert sweep_report.final_record(str(run), 3)["eval/loss"] > 0
  (run / "checkpoints" / "3" / checksums.MANIFEST).unlink()  # Its save never completed.
  assert sweep_report.final_record(str(run), 3) is None
  shutil.rmtree(run / "checkpoints" / "3")
  assert sweep_report.final_record(str(run), 3) is None


def test_a_damaged_probe_result_or_metrics_line_counts_as_not_there(tmp_path):
  """A point's eval/probe-*.json cut short is not probed (the sweep probes again, moving it aside), and a point's
  metrics.jsonl with a damaged line is read for the lines that are records, without stopping the sweep."""
  probe = tmp_path / "eval" / "probe-zero_shot-step3.json"
  probe.parent.mkdir()
  probe.write_text('{"rows": {"trained": {"pairs": [0.7, 0.8]}}}')
  assert sweep_report.probed(str(tmp_path), "zero_shot", 3)
  assert sweep_report.point_values(str(tmp_path), 3) == {"probe/pairs": pytest.approx(0.75)}
  # A probe of part of the items (pretrain probe --limit) is not the point's measure.
  (tmp_path / "eval" / "probe-packages-limit20-step3.json").write_text('{"rows": {"trained": {"lines": [0.1]}}}')
  assert sweep_report.point_values(str(tmp_path), 3) == {"probe/pairs": pytest.approx(0.75)}
  probe.write_text('{"rows": {"trained": {"pairs": [0.7, 0.')
  assert not sweep_report.probed(str(tmp_path), "zero_shot", 3) and sweep_report.point_values(str(tmp_path), 3) == {}
  (tmp_path / "metrics.jsonl").write_text('{"step": 1, "eval/loss": 2.0}\n{garbage\n{"step": 3, "eval/loss": 1.0}\n')
  assert sweep_report.final_record(str(tmp_path), 3) is None  # Readable, but no committed final checkpoint.
