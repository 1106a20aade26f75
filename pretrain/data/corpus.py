"""The bundled corpus: real English text that ships with every CPython.

Documents are the pydoc topic pages (`pydoc_data.topics`) and the docstrings of
the standard library's modules, classes and functions (read with `ast`, nothing
is imported). The corpus is a TFDS dataset, `pretrain_corpus`, prepared into a
local data dir on first use. Documents go to a split by a hash, so the splits
are the same on every machine with the same Python: 5% validation, 15%
downstream (held out from pre-training for the downstream evaluation,
pretrain/downstream/), the rest train. Near-copies go together: many pydoc pages
are sections of others, many docstrings repeat a module's, so a split is drawn
per cluster of documents that share 13-word passages (pretrain/data/overlap.py),
and no held-out document has half its text in another split. Each docstring
also knows its standard library package (`labelled`), the label of the
downstream topic task.
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


from pretrain.data import overlap, tfds_files
from pretrain.system import data_cache, tf_loader
from pretrain.system.console import log
from pretrain.system.errors import UserError

tfds = tf_loader.Lazy("tensorflow_datasets")

VALIDATION_PERCENT = 5
DOWNSTREAM_PERCENT = 15
SPLITS = ("train", "validation", "downstream")
# A held-out document has less than this share of its 13-word shingles in the other splits.
HELD_OUT_SHARE = 0.5
MIN_DOC_CHARS = 200
# Folders of the standard library that are test suites or demos, not documentation.
_SKIP_DIRS = {"site-packages", "test", "tests", "idlelib", "lib2to3", "turtledemo", "__pycache__"}


def _hashed_split(text: str) -> str:
  """The split of a hash of `text`."""
  bucket = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little") % 100
  return ("validation" if bucket < VALIDATION_PERCENT else
          "downstream" if bucket < VALIDATION_PERCENT + DOWNSTREAM_PERCENT else "train")


def assign(texts, clustered: bool = True) -> list[str]:
  """The split of each of `texts`: its near-copy cluster's (overlap.Clusters), by the hash of the member whose
  sha256 is the smallest, so that a document alone goes where its own hash sends it. A held-out document that
  still has HELD_OUT_SHARE of its shingles in the other splits (pieces of several documents, none of them a
  near-copy alone) joins the clusters of the documents it shares them with, and the splits are drawn again, until
  none has. clustered=False: each document by its own hash (corpus 1.1.0's splits, leaky)."""
  if not clustered:
    return [_hashed_split(t) for t in texts]
  sets = [overlap.shingles(t) for t in texts]
  clusters = overlap.Clusters(sets)
  keys = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
  while True:
    split = [""] * len(texts)
    for members in clusters.members().values():
      chosen = _hashed_split(texts[min(members, key=keys.__getitem__)])
      for i in members:
        split[i] = chosen
    mixed = False
    for i, s in enumerate(sets):
      others = [j for j in clusters.sharing(i) if split[j] != split[i]]
      if split[i] != "train" and others and (
          len(s & set().union(*(sets[j] for j in others))) >= HELD_OUT_SHARE * len(s)):
        for j in others:  # Each join merges two clusters (they had two splits): the loop ends.
          clusters.join(i, j)
        mixed = True
    if not mixed:
      return split


@functools.cache
def splits() -> dict[str, str]:
  """{document: its split} of the whole corpus (assign)."""
  texts = documents()
  return dict(zip(texts, assign(texts)))


def split_of(text: str) -> str:
  """The split of a document of the corpus."""
  return splits()[text]


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
  import pydoc_data.topics  # pylint: disable=g-import-not-at-top  (only when building the corpus)

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

  VERSION = tfds.core.Version("1.2.0")
  RELEASE_NOTES = {"1.0.0": "pydoc topics and standard library docstrings.",
                   "1.1.0": "15% of the documents held out of train as the downstream split.",
                   "1.2.0": "Near-copies (documents sharing 13-word passages) in one split: no held-out document "
                            "has half its 13-word shingles in train."}

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
