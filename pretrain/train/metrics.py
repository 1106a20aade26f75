"""Run metrics: one JSON object per logged step, TensorBoard scalars, a loss plot."""

import json
import os

import tensorflow as tf

METRICS_FILE = "metrics.jsonl"


def read(workdir: str) -> list[dict]:
  path = os.path.join(workdir, METRICS_FILE)
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


class MetricsWriter:
  """Writes metrics on process 0 only; the other processes' writers do nothing."""

  def __init__(self, workdir: str, enabled: bool = True):
    self.enabled = enabled
    self.path = os.path.join(workdir, METRICS_FILE)
    self.summary = tf.summary.create_file_writer(os.path.join(workdir, "tensorboard")) if enabled else None

  def truncate_after(self, step: int) -> None:
    """Drops records after `step`: a resumed run rewrites the steps it repeats."""
    if not self.enabled:
      return
    records = [r for r in read(os.path.dirname(self.path)) if r["step"] <= step]
    with open(self.path, "w") as f:
      f.writelines(json.dumps(r) + "\n" for r in records)

  def write(self, step: int, metrics: dict[str, float]) -> None:
    if not self.enabled:
      return
    with open(self.path, "a") as f:
      f.write(json.dumps({"step": step, **{k: float(v) for k, v in metrics.items()}}) + "\n")
    with self.summary.as_default(step=step):
      for name, value in metrics.items():
        tf.summary.scalar(name, float(value))
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
  fig.savefig(path, dpi=100, bbox_inches="tight")
  plt.close(fig)
  return path
