"""One builder at a time for an entry of the data cache.

Processes that start together on one machine (one per device, a launcher's workers, parallel test workers)
would otherwise build the same entry at once: the last TFDS build to finish fails renaming its folder onto the
first's, and a token-store build deletes the other's temporary shard as an interrupted build's leftover. The
lock is an OS file lock, so a builder that dies releases it.
"""

import os

import filelock


def held(path: str):
  """A context that holds `path`.lock (the data cache is a mounted file system: sources.cache_dir)."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  return filelock.FileLock(path + ".lock")


def build_once(path: str, is_built, build) -> None:
  """Calls `build()` unless `is_built()`, holding `path`.lock; a process that waited for the lock checks
  again, and finds the entry another process built meanwhile."""
  if is_built():
    return
  with held(path):
    if not is_built():
      build()
