"""Run metrics: one JSON object per logged step, TensorBoard scalars, a loss plot."""

import io
import json
import os

from pretrain import files, tf_loader

METRICS_FILE = "metrics.jsonl"


def read(workdir: str) -> list[dict]:
  path = os.path.join(workdir, METRICS_FILE)
  if not files.exists(path):
    return []
  return [json.loads(line) for line in files.read_text(path).splitlines() if line.strip()]


class MetricsWriter:
  """Writes metrics on process 0 only; the other processes' writers do nothing.

  The file is rewritten whole on each write (object stores such as gs:// cannot
  append); it stays small, one line per logged step.
  """

  def __init__(self, workdir: str, enabled: bool = True):
    self.enabled = enabled
    self.path = os.path.join(workdir, METRICS_FILE)
    self.records = read(workdir) if enabled else []
    tf = tf_loader.tensorflow()
    self.summary = tf.summary.create_file_writer(os.path.join(workdir, "tensorboard")) if enabled else None

  def _flush(self) -> None:
    files.write_atomically(self.path, "".join(json.dumps(r) + "\n" for r in self.records).encode())

  def truncate_after(self, step: int) -> None:
    """Drops records after `step`: a resumed run rewrites the steps it repeats."""
    if not self.enabled:
      return
    self.records = [r for r in self.records if r["step"] <= step]
    self._flush()

  def write(self, step: int, metrics: dict[str, float]) -> None:
    if not self.enabled:
      return
    self.records.append({"step": step, **{k: float(v) for k, v in metrics.items()}})
    self._flush()
    with self.summary.as_default(step=step):
      for name, value in metrics.items():
        tf_loader.tensorflow().summary.scalar(name, float(value))
    self.summary.flush()


def plot_losses(workdir: str) -> str:
  """Writes loss.png: train and eval loss against step."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  records = read(workdir)
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for key, style in (("train/loss", "-"), ("eval/loss", "o-")):
    points = [(r["step"], r[key]) for r in records if key in r]
    if points:
      ax.plot(*zip(*points), style, label=key, markersize=4)
  ax.set_xlabel("step")
  ax.set_ylabel("cross-entropy (nats per token)")
  ax.grid(alpha=0.3)
  ax.legend()
  path = os.path.join(workdir, "loss.png")
  image = io.BytesIO()
  fig.savefig(image, format="png", dpi=100, bbox_inches="tight")
  plt.close(fig)
  files.write_atomically(path, image.getvalue())
  return path
