"""Run metrics: one JSON object per logged step, TensorBoard scalars, learning curves (curves.png)."""

import io
import json
import os

from pretrain.system import aside, files, tf_loader
from pretrain.system.console import log
from pretrain.system.errors import UserError

METRICS_FILE = "metrics.jsonl"
CURVES_FILE = "curves.png"


def _record(line: bytes) -> dict:
  """The record of a line as the writer writes it: {"step": int, name: number, ...}, or a ValueError saying why not."""
  record = json.loads(line)
  if not isinstance(record, dict):
    raise ValueError(f"a {type(record).__name__}, not a record")
  if not isinstance(record.get("step"), int) or isinstance(record["step"], bool):
    raise ValueError("no step")
  if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in record.values()):
    raise ValueError("a value that is not a number")
  return record


def _parse(path: str) -> tuple[list[dict], list[tuple[int, str]], int]:
  """(the records of the file `path`, (line number, why) of each line that is not one, the number of its last
  line); a directory in its place or a file that cannot be read is a line 0 that is not."""
  if files.isdir(path):
    return [], [(0, "it is a directory")], 0
  try:
    data = files.read_bytes(path)
  except files.errors() as e:
    return [], [(0, files.reason(e))], 0
  records, bad, last = [], [], 0
  for number, line in enumerate(data.splitlines(), 1):
    if line.strip():
      last = number
      try:
        records.append(_record(line))
      except ValueError as e:  # Not JSON, not UTF-8, not a record.
        bad.append((number, str(e)))
  return records, bad, last


def read(workdir: str, strict: bool = True) -> list[dict]:
  """The records of a run's metrics.jsonl. A last line cut short (a copy or an editor stopped mid-write; the
  run itself rewrites the file atomically) is left out with a warning; a damaged line before it is an error
  (`strict`; else the lines that are records, quietly: training moves such a file aside as it next starts)."""
  path = os.path.join(workdir, METRICS_FILE)
  if not files.exists(path):
    return []
  records, bad, last = _parse(path)
  if not strict or not bad:
    return records
  number, why = bad[0]
  if not number:
    raise UserError(f"{path} cannot be read ({why}); the run's next start moves it aside")
  if bad == [(last, why)]:
    log(f"warning: {path}:{number}, its last line, is cut short ({why}); reading the {len(records)} lines before it")
    return records
  raise UserError(f"{path}:{number} is not a metrics record ({why}); delete that line, or the file (the run's "
                  "curves then start from its next logged step)")


class MetricsWriter:
  """Writes metrics on process 0 only; the other processes' writers do nothing.

  The file is rewritten whole on each write (object stores such as gs:// cannot
  append); it stays small, one line per logged step.
  """

  def __init__(self, workdir: str, enabled: bool = True, another_run: str = ""):
    """`another_run`: why the workdir's curves are another run's (its checkpoints are gone: goodput.Goodput), moved
    aside before this one's start."""
    self.enabled = enabled
    self.path, self.tensorboard = os.path.join(workdir, METRICS_FILE), os.path.join(workdir, "tensorboard")
    if enabled and another_run:
      for path in (self.path, self.tensorboard):
        if files.exists(path):
          aside.move(path, f"holds the curves of {another_run}", "this run's start afresh", tag="other-run")
    self.records = self._kept() if enabled else []
    self.summary = tf_loader.tensorflow().summary.create_file_writer(self.tensorboard) if enabled else None

  def _kept(self) -> list[dict]:
    """The records of metrics.jsonl; one with lines that are not (cut short, edited) is moved aside, and the run
    goes on with the records it could read."""
    if not files.exists(self.path):
      return []
    records, bad, _ = _parse(self.path)
    if bad:
      number, why = bad[0]
      where = (f"line {number}" + (f" and {len(bad) - 1} more" if len(bad) > 1 else "") + ": ") if number else ""
      aside.move(self.path, f"is damaged ({where}{why})", f"the run goes on with the {len(records)} records it could "
                                                           "read")
    return records

  def _flush(self) -> None:
    files.write_atomically(self.path, "".join(json.dumps(r) + "\n" for r in self.records).encode())

  def truncate_after(self, step: int) -> None:
    """Drops records after `step`: a resumed run rewrites the steps it repeats. TensorBoard's event files, which
    cannot be cut, are written again from the records kept (else TensorBoard shows those steps twice)."""
    if not self.enabled:
      return
    kept = [r for r in self.records if r["step"] <= step]
    dropped, self.records = len(kept) < len(self.records), kept
    self._flush()
    if dropped:
      self.summary.close()
      for path in files.glob(os.path.join(self.tensorboard, "events.out.tfevents.*")):
        files.remove(path)
      self.summary = tf_loader.tensorflow().summary.create_file_writer(self.tensorboard)
      for record in self.records:
        self._scalars(record)

  def write(self, step: int, metrics: dict[str, float]) -> None:
    if not self.enabled:
      return
    self.records.append({"step": step, **{k: float(v) for k, v in metrics.items()}})
    self._flush()
    self._scalars(self.records[-1])

  def _scalars(self, record: dict) -> None:
    with self.summary.as_default(step=record["step"]):
      for name, value in record.items():
        if name != "step":
          tf_loader.tensorflow().summary.scalar(name, value)
    self.summary.flush()


# The panels of curves.png, in order: (title, metric keys, log scale). The loss panel also draws the validation
# loss of each extra eval task (eval/TASK/loss, pretrain/train/evaluation.py) and the training loss of each member
# of a schedule (train/member/NAME/loss); the schedule panel each member's rate (data/rate/NAME); lm-eval's
# tasks in training (harness/TASK/METRIC) get panels of their own.
PANELS = (
    ("train and validation loss", ("train/loss", "eval/loss"), False),
    ("validation perplexity", ("eval/perplexity",), True),
    ("gradient norm", ("train/grad_norm",), False),
    ("learning rate", ("train/learning_rate",), False),
    ("tokens per second", ("train/tokens_per_second",), False),
    ("data schedule: each member's rate", (), False),
)


def curves_figure(records: list[dict] | dict[str, list[dict]], title: str = ""):
  """A matplotlib Figure of the records' metrics against the step, one panel per entry of PANELS; `records` of
  several runs ({label: records}) drawn over each other, a colour per run and a line style per metric."""
  from matplotlib import figure  # pylint: disable=g-import-not-at-top  (matplotlib: only when drawing)

  runs = {label: [{**r, **busiest_expert(r)} for r in run]
          for label, run in (records.items() if isinstance(records, dict) else [("", records)])}
  records = [r for run in runs.values() for r in run]

  def keys_like(prefix: str, suffix: str = "") -> list[str]:
    return sorted({k for r in records for k in r if k.startswith(prefix) and k.endswith(suffix)})

  extra_losses = [k for k in keys_like("eval/", "/loss") if k != "eval/loss"] + keys_like("train/member/", "/loss")
  (loss_title, loss_keys, loss_log), *others, (rates_title, _, rates_log) = PANELS
  panels = [(loss_title, (*loss_keys, *extra_losses), loss_log), *others,
            (rates_title, tuple(keys_like("data/rate/")), rates_log)]
  expert_load = keys_like("eval/moe_busiest/")
  if expert_load:  # A mixture-of-experts run: 1 is balanced, the experts' number all tokens to one.
    panels.append(("MoE: busiest expert's share x experts, per layer", (*expert_load, "train/moe_load_balance"),
                   False))
  harness = keys_like("harness/")  # lm-eval's tasks during training (train.harness_tasks): scores, then the rest.
  scores = [k for k in harness if k.split("/")[2] in ("acc", "acc_norm", "exact_match")]  # harness/TASK/METRIC[/FILTER]
  panels += [("lm-eval tasks: accuracy", tuple(scores), False),
             ("lm-eval tasks: other metrics", tuple(k for k in harness if k not in scores), True)]
  panels = [panel for panel in panels if panel[1]]  # The schedule's panel of a run without one goes.
  rows = -(-len(panels) // 3)
  # Fixed margins: matplotlib's constrained layout measures every label's extent; drawn at the end of every run,
  # a figure took 0.75 s with it and 0.46 s without (medians of 5, alternated).
  fig = figure.Figure(figsize=(15, 4 * rows))
  fig.subplots_adjust(left=0.06, right=0.98, bottom=0.5 / (4 * rows), top=1 - 0.8 / (4 * rows), wspace=0.3,
                      hspace=0.35)  # Margins of 0.5 and 0.8 inches (the title), room for log-scale tick labels.
  axes = list(fig.subplots(rows, 3).flat)
  for ax in axes[len(panels):]:
    ax.remove()
  for ax, (panel, keys, log) in zip(axes, panels):
    for i, (label, run) in enumerate(runs.items()):
      for j, key in enumerate(keys):
        points = [(r["step"], r[key]) for r in run if key in r]
        if not points:
          continue
        # Evaluations are sparse: markers show where each one is.
        marker = "" if key.startswith("train/") else "o"
        if len(runs) == 1:
          ax.plot(*zip(*points), marker + "-", label=key, markersize=3)
        else:
          ax.plot(*zip(*points), marker + ("-", "--", ":", "-.")[j % 4], color=f"C{i % 10}", label=f"{label} {key}",
                  markersize=3)
    ax.set_title(panel)
    ax.set_xlabel("step")
    if ax.get_lines():
      ax.grid(alpha=0.3)
      if log:
        ax.set_yscale("log")
      if len(ax.get_lines()) > 1:
        ax.legend()
    else:  # An older run, or a metric this run does not log: the other panels still show.
      ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="gray")
      ax.set_xticks([])
      ax.set_yticks([])
  if title:
    fig.suptitle(title)
  return fig


def busiest_expert(record: dict) -> dict[str, float]:
  """From an evaluation's per-expert shares (eval/moe_load/layer_{i}/expert_{e}): each MoE layer's busiest expert's
  share times the number of experts, eval/moe_busiest/layer_{i} (1 when balanced)."""
  shares = {}
  for key, value in record.items():
    if key.startswith("eval/moe_load/"):
      layer = key.split("/")[2]
      shares.setdefault(layer, []).append(value)
  return {f"eval/moe_busiest/{layer}": max(values) * len(values) for layer, values in shares.items()}


IMAGE_FORMATS = ("png", "pdf", "svg")  # What plot_curves writes, by the file's suffix.


def image_format(path: str) -> str:
  """The image format of a file name's suffix (one of IMAGE_FORMATS); a UserError for another."""
  suffix = os.path.splitext(path)[1].lstrip(".").lower()
  if suffix not in IMAGE_FORMATS:
    raise UserError(f"{path!r}: name an image file ending in {', '.join('.' + f for f in IMAGE_FORMATS)}")
  return suffix


def plot_curves(workdir: str, out: str | None = None, others: tuple[str, ...] = ()) -> str:
  """Writes the run's learning curves (curves_figure) to `out` (.png, .pdf or .svg), by default WORKDIR/curves.png,
  with those of the `others` runs over them (then `out` is needed); returns its path."""
  if others and not out:
    raise UserError("several runs' curves go to a file of their own: give --out=FILE.png")
  path = out or os.path.join(workdir, CURVES_FILE)
  kind = image_format(path)
  runs = {}
  for run in (workdir, *others):
    runs[run] = read(run)
    if not runs[run]:
      raise UserError(f"{run!r} holds no metrics ({METRICS_FILE} is missing or empty); give the --workdir of a "
                      "training run")
  names = [os.path.basename(os.path.normpath(run)) for run in runs]
  labels = names if len(set(names)) == len(names) else list(runs)  # A run's folder, or its path where two share it.
  fig = curves_figure(dict(zip(labels, runs.values())) if others else runs[workdir], title=" vs ".join(runs))
  image = io.BytesIO()
  fig.savefig(image, format=kind, dpi=100)
  files.write_atomically(path, image.getvalue())
  return path
