"""Workdir files on a local disk or an object store (gs://...): tf.io.gfile reads and writes both."""

import os
import uuid

import tensorflow as tf

exists = tf.io.gfile.exists
makedirs = tf.io.gfile.makedirs


def local(path: str) -> bool:
  return "://" not in path


def write_atomically(path: str, data: bytes) -> None:
  """All or nothing: written beside `path`, then renamed over it (readers never see half a file)."""
  directory = os.path.dirname(path)
  if directory:
    makedirs(directory)
  temporary = f"{path}.tmp-{uuid.uuid4().hex}"
  with tf.io.gfile.GFile(temporary, "wb") as f:
    f.write(data)
  tf.io.gfile.rename(temporary, path, overwrite=True)


def read_text(path: str) -> str:
  with tf.io.gfile.GFile(path) as f:
    return f.read()
