"""What a checkpoint wrote, to verify before restoring it: the size and CRC-32 of every file of a step.

Orbax writes a step and renames it into place when complete, but nothing in it
notices a file that is later truncated, lost or overwritten: such a checkpoint
fails deep in Orbax, or is restored silently with garbage. The manifest is
written into the step's directory as the save finalizes, so it is committed
with the step.
"""

import json
import os
import zlib

from pretrain.system import files

MANIFEST = "pretrain_checksums.json"
# Orbax's step metadata (times of the save and its commit) is rewritten as the step is renamed into place.
_REWRITTEN = ("_CHECKPOINT_METADATA",)
_CHUNK = 16 << 20


def _crc32(path: str) -> int:
  crc = 0
  with files.open_file(path, "rb") as f:
    while chunk := f.read(_CHUNK):
      crc = zlib.crc32(chunk, crc)
  return crc


def _contents(step_dir: str) -> list[str]:
  """Every file under `step_dir` but the manifest and Orbax's step metadata, relative to it."""
  found = []
  for root, _, names in files.walk(step_dir):
    found += [os.path.relpath(os.path.join(root, n), step_dir) for n in names]
  return sorted(name for name in found if name != MANIFEST and name not in _REWRITTEN)


def write(step_dir: str) -> None:
  manifest = {name: [files.size(os.path.join(step_dir, name)), _crc32(os.path.join(step_dir, name))]
              for name in _contents(step_dir)}
  files.write_atomically(os.path.join(step_dir, MANIFEST), json.dumps(manifest, indent=1).encode())


def size(step_dir: str) -> int | None:
  """Bytes a checkpoint's files took when written (None without a readable manifest)."""
  try:
    return sum(size for size, _ in json.loads(files.read_text(os.path.join(step_dir, MANIFEST))).values())
  except (*files.errors(), json.JSONDecodeError, UnicodeDecodeError):
    return None


def problem(step_dir: str) -> str:
  """What is wrong with a checkpoint's files, or '' when each is as written."""
  path = os.path.join(step_dir, MANIFEST)
  if not files.exists(path):
    return "has no checksum manifest (its save never completed)"
  try:
    manifest = json.loads(files.read_text(path))
  except (json.JSONDecodeError, UnicodeDecodeError):
    return f"has a damaged {MANIFEST}"
  for name, (size, crc) in manifest.items():
    full = os.path.join(step_dir, name)
    if not files.exists(full):
      return f"lacks {name}"
    if files.size(full) != size:
      return f"has {name} of {files.size(full)} bytes, not the {size} written"
    if _crc32(full) != crc:
      return f"has {name} changed since it was written (checksum)"
  return ""
