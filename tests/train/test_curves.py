"""`pretrain plot` and the curves.png a run writes at its end: drawn from a metrics.jsonl written by hand."""

import json
import os
import struct

import pytest

from pretrain import cli
from pretrain.system import tf_loader
from pretrain.train import metrics

TRAIN = [{"step": s, "train/loss": 8.0 - s / 10, "train/accuracy": 0.01 * s, "train/grad_norm": 1.5 - s / 100,
          "train/learning_rate": 1e-4 * s, "train/tokens_per_second": 2000.0 + s} for s in (10, 20, 30)]
EVAL = [{"step": s, "eval/loss": 8.4 - s / 10, "eval/accuracy": 0.01 * s, "eval/perplexity": 4400.0 / (1 + s),
         "eval/corpus_fim/loss": 9.0 - s / 10} for s in (0, 30)]
RECORDS = [EVAL[0], *TRAIN, EVAL[1]]


def write_metrics(workdir, records):
  with open(os.path.join(workdir, metrics.METRICS_FILE), "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in records)


@pytest.fixture(autouse=True)
def _restore_quiet(monkeypatch):
  monkeypatch.setattr(tf_loader, "quiet", tf_loader.quiet)  # cli.main sets it for the process.


def lines_by_label(ax):
  return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}


def test_panels_hold_the_metrics():
  fig = metrics.curves_figure(RECORDS)
  assert [ax.get_title() for ax in fig.axes] == ["train and validation loss", "validation perplexity",
                                                 "gradient norm", "learning rate", "tokens per second"]
  loss, perplexity, grad_norm, learning_rate, tokens = (lines_by_label(ax) for ax in fig.axes)
  assert loss == {"train/loss": ([10, 20, 30], [r["train/loss"] for r in TRAIN]),
                  "eval/loss": ([0, 30], [r["eval/loss"] for r in EVAL]),
                  "eval/corpus_fim/loss": ([0, 30], [r["eval/corpus_fim/loss"] for r in EVAL])}
  assert perplexity == {"eval/perplexity": ([0, 30], [r["eval/perplexity"] for r in EVAL])}
  assert fig.axes[1].get_yscale() == "log"
  assert grad_norm["train/grad_norm"][1] == [r["train/grad_norm"] for r in TRAIN]
  assert learning_rate["train/learning_rate"][1] == [r["train/learning_rate"] for r in TRAIN]
  assert tokens["train/tokens_per_second"][1] == [r["train/tokens_per_second"] for r in TRAIN]


def test_lm_eval_tasks_in_training_get_panels_by_their_metric_whatever_the_filter():
  scores = {"harness/pretrain_cloze/acc": 0.3, "harness/gsm8k/exact_match/strict-match": 0.1,
            "harness/wikitext/word_perplexity": 40.0}
  fig = metrics.curves_figure([*RECORDS, {"step": 30, **scores}])
  accuracy, other = fig.axes[-2:]
  assert [accuracy.get_title(), other.get_title()] == ["lm-eval tasks: accuracy", "lm-eval tasks: other metrics"]
  assert set(lines_by_label(accuracy)) == {"harness/pretrain_cloze/acc", "harness/gsm8k/exact_match/strict-match"}
  assert set(lines_by_label(other)) == {"harness/wikitext/word_perplexity"}


def test_a_metric_not_logged_says_so():
  fig = metrics.curves_figure([{k: v for k, v in r.items() if k != "train/grad_norm"} for r in RECORDS])
  grad_norm = fig.axes[2]
  assert not grad_norm.get_lines() and [t.get_text() for t in grad_norm.texts] == ["not logged"]
  assert lines_by_label(fig.axes[0])  # The others still draw.


def test_plot_command_writes_curves_png(tmp_path, capsys):
  write_metrics(tmp_path, RECORDS)
  assert cli.main(["plot", "--workdir", str(tmp_path)]) == 0
  path = tmp_path / metrics.CURVES_FILE
  assert capsys.readouterr().out.strip() == str(path)
  data = path.read_bytes()
  assert data[:8] == b"\x89PNG\r\n\x1a\n" and 20_000 < len(data) < 2_000_000
  assert struct.unpack(">II", data[16:24]) == (1500, 800)  # IHDR: 15 x 8 inches at 100 dpi.
  assert sorted(os.listdir(tmp_path)) == [metrics.CURVES_FILE, metrics.METRICS_FILE]  # No temporary left.

  out = tmp_path / "elsewhere" / "run.png"
  assert cli.main(["plot", f"--workdir={tmp_path}", f"--out={out}"]) == 0
  assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  # The format the name asks for (a .pdf was a PNG under that name), and a name of no image format refused.
  assert cli.main(["plot", f"--workdir={tmp_path}", f"--out={tmp_path / 'run.pdf'}"]) == 0
  assert (tmp_path / "run.pdf").read_bytes()[:5] == b"%PDF-"
  with pytest.raises(SystemExit):
    cli.main(["plot", f"--workdir={tmp_path}", f"--out={tmp_path / 'run.txt'}"])
  assert capsys.readouterr().err.endswith("run.txt': name an image file ending in .png, .pdf, .svg\n")
  assert not os.path.exists(tmp_path / "run.txt")


def test_several_runs_are_drawn_over_each_other(tmp_path, capsys):
  """A cooldown branch beside its parent: each run's metrics in each panel, a colour per run, labelled by its
  folder; the figure needs a file of its own."""
  parent, branch = tmp_path / "parent", tmp_path / "cooldown"
  for run, records in ((parent, RECORDS), (branch, [{**r, "step": r["step"] + 30} for r in TRAIN])):
    run.mkdir()
    write_metrics(run, records)
  with pytest.raises(SystemExit):
    cli.main(["plot", f"--workdir={parent}", f"--workdir={branch}"])
  assert "give --out=FILE.png" in capsys.readouterr().err
  out = tmp_path / "compare.png"
  assert cli.main(["plot", f"--workdir={parent}", f"--workdir={branch}", f"--out={out}"]) == 0
  assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not (parent / metrics.CURVES_FILE).exists()
  fig = metrics.curves_figure({"parent": RECORDS, "cooldown": [{**r, "step": r["step"] + 30} for r in TRAIN]})
  loss = fig.axes[0]
  lines = lines_by_label(loss)
  assert lines["parent train/loss"][0] == [10, 20, 30] and lines["cooldown train/loss"][0] == [40, 50, 60]
  assert "parent eval/loss" in lines and "cooldown eval/loss" not in lines
  colours = {line.get_label(): line.get_color() for line in loss.get_lines()}
  assert colours["parent train/loss"] == colours["parent eval/loss"] != colours["cooldown train/loss"]


@pytest.mark.parametrize("records", [None, []], ids=["no metrics.jsonl", "an empty one"])
def test_a_workdir_without_metrics_is_one_clear_error(tmp_path, capsys, records):
  if records is not None:
    write_metrics(tmp_path, records)
  with pytest.raises(SystemExit) as exit_info:
    cli.main(["plot", f"--workdir={tmp_path}"])
  assert exit_info.value.code == 2
  assert capsys.readouterr().err.splitlines() == [
      f"error: {str(tmp_path)!r} holds no metrics (metrics.jsonl is missing or empty); give the --workdir of a "
      "training run"]
  assert not os.path.exists(tmp_path / metrics.CURVES_FILE)
