"""Workdir files go through tf.io.gfile, so a gs:// workdir works; TF's in-memory ram:// filesystem stands in
for an object store here (no append, no local path)."""

import json

import tensorflow as tf

from pretrain.system import files
from pretrain.train import metrics
from pretrain.vocab import pipeline as vocab


def test_atomic_write_leaves_only_the_file():
  files.write_atomically("ram://files/a/b/config.json", b'{"x": 1}')
  assert json.loads(files.read_text("ram://files/a/b/config.json")) == {"x": 1}
  files.write_atomically("ram://files/a/b/config.json", b'{"x": 2}')
  assert json.loads(files.read_text("ram://files/a/b/config.json")) == {"x": 2}
  assert tf.io.gfile.listdir("ram://files/a/b") == ["config.json"]


def test_metrics_and_plot_on_an_object_store():
  writer = metrics.MetricsWriter("ram://metrics/run")
  writer.write(1, {"train/loss": 2.0})
  writer.write(2, {"train/loss": 1.0, "eval/loss": 1.5})
  writer.truncate_after(1)  # As on resuming from step 1.
  writer.write(2, {"train/loss": 0.5})
  assert metrics.read("ram://metrics/run") == [{"step": 1, "train/loss": 2.0}, {"step": 2, "train/loss": 0.5}]
  again = metrics.MetricsWriter("ram://metrics/run")  # A resumed run keeps the earlier records.
  again.write(3, {"train/loss": 0.25})
  assert [r["step"] for r in metrics.read("ram://metrics/run")] == [1, 2, 3]
  path = metrics.plot_curves("ram://metrics/run")
  assert tf.io.gfile.GFile(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_vocabulary_from_an_object_store(vocabulary):
  with open(vocabulary.sentencepiece_model_file, "rb") as f:
    files.write_atomically("ram://files/spm.model", f.read())
  remote = vocab.load("ram://files/spm.model")
  assert remote.encode("Return the number of items.") == vocabulary.encode("Return the number of items.")
