"""The bundled corpus: real English text that ships with every CPython.

Documents are the pydoc topic pages (`pydoc_data.topics`) and the docstrings of
the standard library's modules, classes and functions (read with `ast`, nothing
is imported). The corpus is a TFDS dataset, `pretrain_corpus`, prepared into a
local data dir on first use; documents go to train or validation by a hash of
their text, so the split is the same on every machine with the same Python.
"""

import ast
import contextlib
import functools
import hashlib
import os
import pathlib
import sys
import sysconfig

import tensorflow_datasets as tfds

from pretrain.data import cache_lock

VALIDATION_PERCENT = 5
MIN_DOC_CHARS = 200
# Folders of the standard library that are test suites or demos, not documentation.
_SKIP_DIRS = {"site-packages", "test", "tests", "idlelib", "lib2to3", "turtledemo", "__pycache__"}


def is_validation(text: str) -> bool:
  digest = hashlib.sha256(text.encode("utf-8")).digest()
  return int.from_bytes(digest[:8], "little") % 100 < VALIDATION_PERCENT


def _stdlib_docstrings():
  root = pathlib.Path(sysconfig.get_paths()["stdlib"])
  for path in sorted(root.rglob("*.py")):
    rel = path.relative_to(root)
    if _SKIP_DIRS.intersection(rel.parts[:-1]):
      continue
    try:
      tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError):
      continue
    for node in ast.walk(tree):
      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        doc = ast.get_docstring(node)
        if doc:
          yield doc


@functools.cache
def documents() -> tuple[str, ...]:
  """Every document of the corpus, stripped, deduplicated, in a fixed order."""
  import pydoc_data.topics  # pylint: disable=g-import-not-at-top

  texts = [pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics)]
  stripped = (text.strip() for text in [*texts, *_stdlib_docstrings()])
  return tuple(dict.fromkeys(t for t in stripped if len(t) >= MIN_DOC_CHARS))


class PretrainCorpus(tfds.core.GeneratorBasedBuilder):
  """English documentation text bundled with CPython."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "pydoc topics and standard library docstrings."}

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self,
        description=__doc__,
        features=tfds.features.FeaturesDict({"text": tfds.features.Text()}),
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing to download.
    return {"train": self._generate_examples(False), "validation": self._generate_examples(True)}

  def _generate_examples(self, validation: bool):
    for text in documents():
      if is_validation(text) == validation:
        yield hashlib.sha256(text.encode("utf-8")).hexdigest(), {"text": text}


def prepare(data_dir: str) -> tfds.core.DatasetBuilder:
  """Builds the corpus into `data_dir` once; later calls reuse it."""
  os.makedirs(data_dir, exist_ok=True)

  def build():
    print(f"Preparing the bundled corpus in {data_dir} (once)...", file=sys.stderr, flush=True)
    tfds.display_progress_bar(False)
    with contextlib.redirect_stdout(sys.stderr):  # TFDS prints its progress; stdout is for results.
      PretrainCorpus(data_dir=data_dir).download_and_prepare(file_format="tfrecord")

  # A new builder for each look: one made before another process prepared the corpus does not see it.
  cache_lock.build_once(os.path.join(data_dir, "pretrain_corpus"),
                        lambda: PretrainCorpus(data_dir=data_dir).is_prepared(), build)
  return PretrainCorpus(data_dir=data_dir)
