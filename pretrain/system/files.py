"""Workdir files on a local disk or an object store (gs://...), through one of etils.epath's backends (Orbax
writes its checkpoints through epath too): the os module for local paths; for the others TensorFlow's gfile
where TensorFlow is installed, as the data path reads (gs://, and its in-memory ram:// that the tests use), and
without it, on an accelerator image that has only the model side, fsspec (gcsfs).
"""

import functools
import importlib.util
import os
import sys
import uuid

from etils.epath import backend

from pretrain.system import tf_loader
from pretrain.system.errors import UserError


@functools.cache
def _tensorflow_installed() -> bool:
  return importlib.util.find_spec("tensorflow") is not None


def _backend(path: str) -> backend.Backend:
  """The os module for a local path (a command that reads only local files starts without TensorFlow's
  seconds); TensorFlow's gfile for a remote one where it is installed, else fsspec."""
  if local(path):
    return backend.os_backend
  if _tensorflow_installed():
    tf_loader.tensorflow()  # Imported quietly, with the GPUs hidden from it, before epath imports it.
    return backend.tf_backend
  return backend.fsspec_backend


def errors() -> tuple:
  """What a failed file operation raises: OSError, or tf.errors.OpError through TensorFlow's gfile."""
  tf = sys.modules.get("tensorflow")
  return (OSError, tf.errors.OpError) if tf else (OSError,)


def not_found() -> tuple:
  tf = sys.modules.get("tensorflow")
  return (FileNotFoundError, tf.errors.NotFoundError) if tf else (FileNotFoundError,)


def reason(error: Exception) -> str:
  """The cause of a failed file operation, without its Python type, e.g. 'No space left on device'."""
  return getattr(error, "message", None) or getattr(error, "strerror", None) or str(error)


def exists(path: str) -> bool:
  return _backend(path).exists(path)


def isdir(path: str) -> bool:
  return _backend(path).isdir(path)


def makedirs(path: str) -> None:
  _backend(path).makedirs(path, exist_ok=True)


def local(path: str) -> bool:
  return "://" not in path


def open_file(path: str, mode: str = "r"):
  return _backend(path).open(path, mode)


def size(path: str) -> int:
  # os.path for local files: epath's os backend also looks up the owner's name, which fails for a user
  # without a passwd entry (a container run as an arbitrary uid).
  return os.path.getsize(path) if local(path) else _backend(path).stat(path).length


def glob(pattern: str) -> list[str]:
  return list(_backend(pattern).glob(pattern))


def walk(directory: str):
  """(directory, subdirectories, file names) of `directory` and of each directory below it."""
  return _backend(directory).walk(directory)


def remove(path: str) -> None:
  _backend(path).remove(path)


def remove_tree(path: str) -> None:
  _backend(path).rmtree(path)


def rename(source: str, destination: str) -> None:
  """Renames `source` over `destination` (replacing it if it exists)."""
  _backend(source).replace(source, destination)


def copy(source: str, destination: str) -> None:
  _backend(destination).copy(source, destination, overwrite=True)


def write_atomically(path: str, data: bytes) -> None:
  """All or nothing: written beside `path`, then renamed over it (readers never see half a file, and a
  failed write, a full disk say, leaves no temporary file behind)."""
  directory = os.path.dirname(path)
  if directory:
    makedirs(directory)
  temporary = f"{path}.tmp-{uuid.uuid4().hex}"
  try:
    with open_file(temporary, "wb") as f:
      f.write(data)
    rename(temporary, path)
  except BaseException as e:
    try:
      remove(temporary)
    except errors():
      pass
    if isinstance(e, errors()):
      raise UserError(f"could not write {path} ({reason(e)}); free space or fix the permissions, then rerun "
                      "(a training run resumes from its last checkpoint)") from None
    raise


def read_text(path: str) -> str:
  with open_file(path) as f:
    return f.read()


def read_bytes(path: str) -> bytes:
  with open_file(path, "rb") as f:
    return f.read()
