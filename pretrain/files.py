"""Workdir files on a local disk or an object store (gs://...): tf.io.gfile reads and writes both.

Every module reaches tf.io.gfile through here, so TensorFlow is imported on the
first file touched (pretrain.tf_loader), not when a module is imported.
"""

import os
import uuid

from pretrain import tf_loader
from pretrain.errors import UserError


def gfile():
  return tf_loader.tensorflow().io.gfile


def errors() -> tuple:
  """What a failed file operation raises: OSError locally, tf.errors.OpError through gfile."""
  return (OSError, tf_loader.tensorflow().errors.OpError)


def not_found() -> tuple:
  return (FileNotFoundError, tf_loader.tensorflow().errors.NotFoundError)


def reason(error: Exception) -> str:
  """The cause of a failed file operation, without its Python type, e.g. 'No space left on device'."""
  return getattr(error, "message", None) or getattr(error, "strerror", None) or str(error)


def exists(path: str) -> bool:
  return gfile().exists(path)


def makedirs(path: str) -> None:
  gfile().makedirs(path)


def local(path: str) -> bool:
  return "://" not in path


def write_atomically(path: str, data: bytes) -> None:
  """All or nothing: written beside `path`, then renamed over it (readers never see half a file, and a
  failed write, a full disk say, leaves no temporary file behind)."""
  directory = os.path.dirname(path)
  if directory:
    makedirs(directory)
  temporary = f"{path}.tmp-{uuid.uuid4().hex}"
  try:
    with gfile().GFile(temporary, "wb") as f:
      f.write(data)
    gfile().rename(temporary, path, overwrite=True)
  except BaseException as e:
    try:
      gfile().remove(temporary)
    except errors():
      pass
    if isinstance(e, errors()):
      raise UserError(f"could not write {path} ({reason(e)}); free space or fix the permissions, then rerun "
                      "(a training run resumes from its last checkpoint)") from None
    raise


def read_text(path: str) -> str:
  with gfile().GFile(path) as f:
    return f.read()
