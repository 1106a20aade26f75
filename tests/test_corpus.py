import tensorflow_datasets as tfds

from pretrain.data import corpus


def test_split_is_deterministic_disjoint_and_complete(corpus_source):
  train = list(corpus_source.texts("train"))
  validation = list(corpus_source.texts("validation"))
  assert len(validation) > 50 and len(train) > 20 * len(validation)
  assert not set(train) & set(validation)
  assert sorted(train + validation) == sorted(corpus.documents())
  assert all(corpus.is_validation(t) for t in validation)
  assert not any(corpus.is_validation(t) for t in train)


def test_no_empty_or_short_documents(corpus_source):
  for split in ("train", "validation"):
    for text in corpus_source.texts(split):
      assert text == text.strip() and len(text) >= corpus.MIN_DOC_CHARS


def test_prepared_once_and_reused(cache_dir, corpus_source):
  del corpus_source  # Prepared it.
  builder = tfds.builder("pretrain_corpus", data_dir=f"{cache_dir}/tfds")
  assert builder.is_prepared()
  assert builder.info.splits["train"].num_examples + builder.info.splits["validation"].num_examples == len(
      corpus.documents())


def test_first_preparation_keeps_stdout_for_results(tmp_path, capsys):
  corpus.prepare(str(tmp_path / "tfds"))
  captured = capsys.readouterr()
  assert captured.out == "" and "Preparing the bundled corpus" in captured.err


def test_empty_cache_variable_means_the_default(monkeypatch):
  import os  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  from pretrain.data import sources  # pylint: disable=g-import-not-at-top
  monkeypatch.setenv("PRETRAIN_CACHE", "")
  assert sources.cache_dir(ml_collections.ConfigDict({"cache_dir": ""})) == os.path.expanduser("~/.cache/pretrain")
