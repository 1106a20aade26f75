import os
import subprocess
import sys

import pytest

import tensorflow_datasets as tfds

from pretrain.data import corpus


def test_split_is_deterministic_disjoint_and_complete(corpus_source):
  texts = {split: list(corpus_source.texts(split)) for split in corpus.SPLITS}
  assert len(texts["validation"]) > 50 and len(texts["train"]) > 10 * len(texts["validation"])
  assert 2 * len(texts["validation"]) < len(texts["downstream"]) < 4 * len(texts["validation"])  # 15% and 5%
  assert sorted(sum(texts.values(), [])) == sorted(corpus.documents())
  for split, documents in texts.items():
    assert all(corpus.split_of(t) == split for t in documents)


def test_no_empty_or_short_documents(corpus_source):
  for split in corpus.SPLITS:
    for text in corpus_source.texts(split):
      assert text == text.strip() and len(text) >= corpus.MIN_DOC_CHARS


def test_documents_know_their_package():
  labelled = dict(corpus.labelled())
  assert labelled[next(t for t in labelled if t.startswith("JSON (JavaScript Object Notation)"))] == "json"
  assert {"email", "asyncio", "xml", "pydoc"} <= set(labelled.values())
  assert list(labelled) == list(corpus.documents())


def test_prepared_once_and_reused(cache_dir, corpus_source):
  del corpus_source  # Prepared it.
  builder = tfds.builder("pretrain_corpus", data_dir=f"{cache_dir}/tfds")
  assert builder.is_prepared()
  assert sum(builder.info.splits[split].num_examples for split in corpus.SPLITS) == len(corpus.documents())


@pytest.mark.slow
def test_processes_that_start_together_prepare_it_once(tmp_path):
  """Two processes on a fresh cache (one per device, parallel workers): one prepares, the other waits and reuses
  it; both keep stdout for results."""
  script = "import sys; from pretrain.data import corpus; corpus.prepare(sys.argv[1])"
  env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
  processes = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "tfds")], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
  results = [(p.wait(timeout=300), *p.communicate()) for p in processes]
  assert [(rc, out) for rc, out, _ in results] == [(0, ""), (0, "")], results
  assert sum("Preparing the bundled corpus" in err for _, _, err in results) == 1
  assert tfds.builder("pretrain_corpus", data_dir=str(tmp_path / "tfds")).is_prepared()


def test_empty_cache_variable_means_the_default(monkeypatch):
  import os  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  from pretrain.system import data_cache  # pylint: disable=g-import-not-at-top
  monkeypatch.setenv("PRETRAIN_CACHE", "")
  assert data_cache.cache_dir(ml_collections.ConfigDict({"cache_dir": ""})) == os.path.expanduser("~/.cache/pretrain")
