"""The bundled corpus: real English text that ships with every CPython.

Documents are the pydoc topic pages (`pydoc_data.topics`) and the docstrings of
the standard library's modules, classes and functions (read with `ast`, nothing
is imported). The corpus is a TFDS dataset, `pretrain_corpus`, prepared into a
local data dir on first use. Documents go to a split by a hash of their text, so
the splits are the same on every machine with the same Python: 5% validation,
15% downstream (held out from pre-training for the downstream evaluation,
pretrain/downstream/), the rest train. Each docstring also knows its standard
library package (`labelled`), the label of the downstream topic task.
"""

import ast
import contextlib
import functools
import hashlib
import os
import pathlib
import sys
import sysconfig
import uuid


from pretrain.data import tfds_files
from pretrain.system import data_cache, tf_loader
from pretrain.system.console import log
from pretrain.system.errors import UserError

tfds = tf_loader.Lazy("tensorflow_datasets")

VALIDATION_PERCENT = 5
DOWNSTREAM_PERCENT = 15
SPLITS = ("train", "validation", "downstream")
MIN_DOC_CHARS = 200
# Folders of the standard library that are test suites or demos, not documentation.
_SKIP_DIRS = {"site-packages", "test", "tests", "idlelib", "lib2to3", "turtledemo", "__pycache__"}


def split_of(text: str) -> str:
  """The split a document goes to, by a hash of its text."""
  bucket = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little") % 100
  return ("validation" if bucket < VALIDATION_PERCENT else
          "downstream" if bucket < VALIDATION_PERCENT + DOWNSTREAM_PERCENT else "train")


def _stdlib_docstrings():
  """(docstring, the top-level package or module it belongs to) of the standard library, in a fixed order."""
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
          yield doc, rel.parts[0].removesuffix(".py")


@functools.cache
def labelled() -> tuple[tuple[str, str], ...]:
  """(document, its source) of every document of the corpus, stripped, deduplicated (the first source kept), in a
  fixed order: the source is 'pydoc' for a topic page, else the standard library package or module."""
  import pydoc_data.topics  # pylint: disable=g-import-not-at-top

  pages = [(pydoc_data.topics.topics[k], "pydoc") for k in sorted(pydoc_data.topics.topics)]
  kept = {}
  for text, source in [*pages, *_stdlib_docstrings()]:
    text = text.strip()
    if len(text) >= MIN_DOC_CHARS:
      kept.setdefault(text, source)
  return tuple(kept.items())


def documents() -> tuple[str, ...]:
  """Every document of the corpus, in a fixed order."""
  return tuple(text for text, _ in labelled())


class PretrainCorpus(tfds.core.GeneratorBasedBuilder):
  """English documentation text bundled with CPython."""

  VERSION = tfds.core.Version("1.1.0")
  RELEASE_NOTES = {"1.0.0": "pydoc topics and standard library docstrings.",
                   "1.1.0": "15% of the documents held out of train as the downstream split."}

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self,
        description=__doc__,
        features=tfds.features.FeaturesDict({"text": tfds.features.Text()}),
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing to download.
    return {split: self._generate_examples(split) for split in SPLITS}

  def _generate_examples(self, split: str):
    for text in documents():
      if split_of(text) == split:
        yield hashlib.sha256(text.encode("utf-8")).hexdigest(), {"text": text}


def prepare(data_dir: str) -> tfds.core.DatasetBuilder:
  """Builds the corpus into `data_dir` once; later calls reuse it."""
  os.makedirs(data_dir, exist_ok=True)

  def build():
    print(f"Preparing the bundled corpus in {data_dir} (once)...", file=sys.stderr, flush=True)
    tfds.display_progress_bar(False)
    # TFDS prints its progress: to stderr (stdout is for results), or nowhere where the command is quiet.
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull if tf_loader.quiet else sys.stderr):
      PretrainCorpus(data_dir=data_dir).download_and_prepare(file_format="tfrecord")

  # A new builder for each look: one made before another process prepared the corpus does not see it.
  def builder():
    return tfds_files.builder("pretrain_corpus", data_dir, make=lambda: PretrainCorpus(data_dir=data_dir))

  def damage() -> str | None:
    try:
      prepared = builder()
      if prepared.is_prepared():
        tfds_files.check(prepared)
      return None
    except tfds_files.Damaged as e:
      return str(e)

  dataset_dir = os.path.join(data_dir, "pretrain_corpus")
  for attempt in range(2):
    problem = damage()
    if problem is None:
      data_cache.build_once(dataset_dir, lambda: builder().is_prepared(), build)
      problem = damage()
      if problem is None:
        return builder()
    if attempt:
      raise UserError(f"the bundled corpus in {dataset_dir} was prepared again and is still damaged ({problem}); "
                      "check the disk of the cache directory (data.cache_dir)")
    with data_cache.held(dataset_dir):  # Of several processes finding it damaged, one moves it aside.
      if damage() is not None:
        aside = f"{dataset_dir}.damaged-{uuid.uuid4().hex[:8]}"
        os.rename(dataset_dir, aside)
        log(f"warning: the bundled corpus in {dataset_dir} is damaged ({problem}); moved aside to {aside} "
            "(delete it at will), preparing it again")
