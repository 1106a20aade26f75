"""The data cache: where it is (cache_dir), and one builder at a time for each of its entries.

Processes that start together on one machine (one per device, a launcher's workers, parallel test workers)
would otherwise build the same entry at once: the last TFDS build to finish fails renaming its folder onto the
first's, and a token-store build deletes the other's temporary shard as an interrupted build's leftover. The
lock is an OS file lock, so a builder that dies releases it.
"""

import errno
import os

import filelock

from pretrain.system import files
from pretrain.system.errors import UserError


def held(path: str):
  """A context that holds `path`.lock (the data cache is a mounted file system: cache_dir)."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  return filelock.FileLock(path + ".lock")


def build_once(path: str, is_built, build) -> None:
  """Calls `build()` unless `is_built()`, holding `path`.lock; a process that waited for the lock checks
  again, and finds the entry another process built meanwhile."""
  if is_built():
    return
  with held(path):
    if not is_built():
      try:
        build()
      except Exception as e:  # pylint: disable=broad-except
        if not _disk_full(e):
          raise
        raise UserError(f"the data cache's disk is full: writing {path} failed ({files.reason(e)}); free space "
                        "there, or set data.cache_dir (or $PRETRAIN_CACHE) to a disk with room, then rerun (the "
                        "entry is built again from the start)") from None


def _disk_full(error: Exception) -> bool:
  """Whether a write failed for want of space: OSError's ENOSPC, or TensorFlow's and ArrayRecord's wording of it."""
  return getattr(error, "errno", None) == errno.ENOSPC or "No space left on device" in str(error) \
      or type(error).__name__ == "ResourceExhaustedError"


def cache_dir(data_cfg) -> str:
  """The data cache: data.cache_dir, else $PRETRAIN_CACHE, else ~/.cache/pretrain. It must be a mounted file
  system (hosts that build one store together share it as NFS or a gcsfuse mount): its entries are built
  under OS file locks and read through the os module and ArrayRecord's local reader."""
  path = data_cfg.cache_dir or os.environ.get("PRETRAIN_CACHE") or "~/.cache/pretrain"
  named = "$PRETRAIN_CACHE" if not data_cfg.cache_dir and os.environ.get("PRETRAIN_CACHE") else "data.cache_dir"
  if not files.local(path):
    raise UserError(f"the data cache must be a directory of a mounted file system, not {path} (data.cache_dir, "
                    "else $PRETRAIN_CACHE): use a local disk, or for hosts that share it an NFS or gcsfuse mount; "
                    "a run's workdir can still be on an object store")
  path = os.path.expanduser(path)
  problem = "it is a file" if os.path.isfile(path) else None
  try:
    os.makedirs(path, exist_ok=True)
  except OSError as e:
    problem = problem or e.strerror.lower()
  if problem is None and not os.access(path, os.W_OK | os.X_OK):
    problem = "it is not writable"
  if problem:
    raise UserError(f"the data cache {path} cannot be used ({problem}); set {named} to a "
                    "writable directory")
  return path
