"""A damaged data-cache entry never hangs a run or shows a traceback: a token store cut short, with changed
bytes, a missing shard or a cut store.json is moved aside and built again when opened (the same rows as
before); bytes that change after it was opened end the run with one line naming the store and the fix; a
cached SentencePiece model that is not one is trained again."""

import os

import numpy as np
import pytest

from pretrain import run as run_lib
from pretrain.data import token_store, vocab
from pretrain.errors import UserError
from tests.conftest import tiny_config


@pytest.fixture
def files_run(tmp_path, cache_dir, vocabulary):
  (tmp_path / "zebra.txt").write_text("\n".join(f"zebra {i} " * 20 for i in range(200)))
  cfg = tiny_config(f"--config.data.cache_dir={tmp_path}/cache", "--config.data.source=files",
                    f"--config.data.train_files={tmp_path}/*.txt",
                    f"--config.tokenizer.path={vocabulary.sentencepiece_model_file}")
  del cache_dir
  return cfg


def _first_batches(cfg, n=2):
  batches = run_lib.Run.build_with_data(cfg).train_batches()
  return [next(batches) for _ in range(n)]


def _store(cfg):
  (store,) = [d for d in os.scandir(os.path.join(cfg.data.cache_dir, "token_stores"))
              if d.is_dir() and d.name.startswith("files-train") and ".damaged-" not in d.name]
  return store.path


def _cut(path):
  os.truncate(path, os.path.getsize(path) // 2)


def _flip(path):
  with open(path, "r+b") as f:
    f.seek(os.path.getsize(path) // 2)
    byte = f.read(1)
    f.seek(-1, os.SEEK_CUR)
    f.write(bytes([byte[0] ^ 0xFF]))


SHARD = "documents-00000-of-00001.array_record"


DAMAGES = {"shard cut short": lambda d: _cut(os.path.join(d, SHARD)),
           "shard bytes flipped": lambda d: _flip(os.path.join(d, SHARD)),
           "shard missing": lambda d: os.remove(os.path.join(d, SHARD)),
           "store.json cut": lambda d: _cut(os.path.join(d, token_store.META))}


def test_a_damaged_store_is_moved_aside_and_built_again(files_run, capsys):
  """Each damage in turn, the store opened again as a run opens it; the last one through a whole run's batches."""
  before = _first_batches(files_run)
  run = run_lib.Run.build_with_data(files_run)
  task, source, _ = run.member_tasks()[0]
  store_dir = _store(files_run)
  original = token_store.TokenStore(store_dir, run.vocabulary).read(range(10))
  for name, damage in DAMAGES.items():
    damage(store_dir)
    if name != "store.json cut":
      store = token_store.open_or_build(task, source, "train", run.vocabulary, files_run.data.cache_dir)
      for got, want in zip(store.read(range(10)), original):
        np.testing.assert_array_equal(got, want)
  after = _first_batches(files_run)
  for a, b in zip(before, after):
    for key in a:
      np.testing.assert_array_equal(a[key], b[key])
  err = capsys.readouterr()
  assert (err.out + err.err).count("building it again") == len(DAMAGES)
  assert sum(".damaged-" in name for name in os.listdir(os.path.dirname(store_dir))) == len(DAMAGES)


def test_bytes_changed_after_opening_end_the_run_with_one_line(files_run, monkeypatch):
  _first_batches(files_run)
  monkeypatch.setattr(token_store, "VERIFY_BYTES", 0)  # As a store too big to check its digests when opened.
  _flip(os.path.join(_store(files_run), SHARD))
  with pytest.raises(UserError, match=r"the token store .* cannot be read .*delete it and rerun") as error:
    _first_batches(files_run, n=20)
  assert "\n" not in str(error.value)


@pytest.mark.parametrize("content", [b"", b"\x00garbage\xff"], ids=["empty", "garbage"])
def test_a_cached_vocabulary_that_is_no_model_is_trained_again(tmp_path, corpus_source, content, capfd):
  texts = list(corpus_source.texts("train", max_chars=200_000))
  path = vocab.cached_model(texts, 512, "unigram", str(tmp_path), ("[MASK]",))
  with open(path, "wb") as f:
    f.write(content)
  assert vocab.cached_model(texts, 512, "unigram", str(tmp_path), ("[MASK]",)) == path
  assert vocab.single_piece_id(vocab.load(path), "[MASK]") >= 3
  assert "is not a SentencePiece model; moved aside" in capfd.readouterr().err
