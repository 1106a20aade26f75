"""A prepared TFDS dataset checked cheaply before it is read, so that damaged files are named (or, for the
bundled corpus, rebuilt) instead of failing inside a data thread.

The check costs a stat per file: dataset_info.json must parse, and each split's TFRecord files must hold the
bytes it records (TFDS records a split's payload bytes; each record adds 16 bytes of length and checksums),
so a file cut short or missing is found. Changed bytes inside a record are caught on reading by TFRecord's
checksums (pretrain.data.sources.reading).
"""

import os

from google.protobuf import json_format

from pretrain.system import tf_loader
from pretrain.system.errors import UserError

tfds = tf_loader.Lazy("tensorflow_datasets")

RECORD_FRAMING = 16  # A TFRecord's length (8 bytes), its checksum (4) and the data's checksum (4).


class Damaged(Exception):
  """A prepared dataset's files are not those its dataset_info.json describes."""


def builder(name: str, data_dir: str | None, make=None):
  """The dataset's builder (`make()` where given, else tfds.builder), Damaged where dataset_info.json does not
  parse."""
  try:
    return make() if make else tfds.builder(name, data_dir=data_dir)
  except json_format.ParseError as e:
    raise Damaged(f"its dataset_info.json is not valid ({str(e).splitlines()[0]})") from None


def check(prepared) -> None:
  """Raises Damaged where a split's TFRecord files are missing or hold other than the recorded bytes."""
  if prepared.info.file_format != tfds.core.FileFormat.TFRECORD:
    return  # Other formats are checked by their readers only.
  for name, split in prepared.info.splits.items():
    paths = [os.fspath(p) for p in split.filepaths]
    for path in paths:
      if not os.path.exists(path):
        raise Damaged(f"{path} is missing")
    held = sum(os.path.getsize(p) for p in paths)
    recorded = int(split.num_bytes) + RECORD_FRAMING * sum(split.shard_lengths)
    if held != recorded:
      raise Damaged(f"the {name} split's files hold {held} bytes where dataset_info.json records {recorded} "
                    "(a file cut short or changed)")


def rebuild_hint(name: str, data_dir: str | None) -> str:
  where = f" --data_dir={data_dir}" if data_dir else ""
  return f"build it again: tfds build {name.split(':')[0]}{where} --overwrite"


def checked_builder(name: str, data_dir: str | None):
  """A user's dataset: its builder, checked; a damaged one is a UserError saying how to build it again."""
  try:
    prepared = builder(name, data_dir)
    if prepared.is_prepared():
      check(prepared)
    return prepared
  except Damaged as e:
    raise UserError(f"TFDS dataset {name!r} is damaged: {e}; {rebuild_hint(name, data_dir)}") from None
