"""A damaged data-cache entry never hangs a run or shows a traceback: a token store cut short, with changed
bytes, a missing shard or a cut store.json is moved aside and built again when opened (the same rows as
before); bytes that change after it was opened end the run with one line naming the store and the fix; a
cached SentencePiece model that is not one is trained again. A TFDS dataset whose files are cut short or
missing, or whose dataset_info.json does not parse, is named with the command that builds it again (the bundled
corpus is moved aside and prepared again); a record whose bytes changed ends the read with one line."""

import os
import shutil

import ml_collections
import numpy as np
import pytest

from pretrain import run as run_lib, vocab
from pretrain.data import corpus, sources, tfds_files, token_store
from pretrain.system.errors import UserError
from pretrain.vocab.cache import cached_model
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


@pytest.mark.slow
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
  path = cached_model(texts, 512, "unigram", str(tmp_path), ("[MASK]",))
  with open(path, "wb") as f:
    f.write(content)
  assert cached_model(texts, 512, "unigram", str(tmp_path), ("[MASK]",)) == path
  assert vocab.single_piece_id(vocab.load(path), "[MASK]") >= 3
  assert "is not a SentencePiece model; moved aside" in capfd.readouterr().err


def _corpus_copy(cache_dir, tmp_path):
  """A copy of the prepared bundled corpus: (its data dir, its version dir)."""
  shutil.copytree(f"{cache_dir}/tfds/pretrain_corpus", tmp_path / "tfds" / "pretrain_corpus")
  return str(tmp_path / "tfds"), str(tmp_path / "tfds" / "pretrain_corpus" / str(corpus.PretrainCorpus.VERSION))


def _split_file(version_dir, split):
  return os.path.join(version_dir, f"pretrain_corpus-{split}.tfrecord-00000-of-00001")


TFDS_DAMAGES = {"split file cut short": lambda d: _cut(_split_file(d, "train")),
                "split file missing": lambda d: os.remove(_split_file(d, "validation")),
                "dataset_info.json cut": lambda d: _cut(os.path.join(d, "dataset_info.json"))}


def _tfds_config(data_dir):
  return ml_collections.ConfigDict({"source": "tfds", "tfds_name": f"pretrain_corpus:{corpus.PretrainCorpus.VERSION}",
                                    "tfds_data_dir": data_dir, "train_split": "train",
                                    "validation_split": "validation", "text_key": "text"})


@pytest.mark.parametrize("damage", TFDS_DAMAGES)
def test_a_damaged_tfds_dataset_is_named_with_the_command_that_builds_it_again(corpus_source, cache_dir, tmp_path,
                                                                               damage):
  del corpus_source  # Prepared the corpus in cache_dir.
  data_dir, version_dir = _corpus_copy(cache_dir, tmp_path)
  TFDS_DAMAGES[damage](version_dir)
  pattern = (rf"TFDS dataset 'pretrain_corpus:{corpus.PretrainCorpus.VERSION}' is damaged: .*; build it again: "
             rf"tfds build pretrain_corpus --data_dir={data_dir} --overwrite")
  with pytest.raises(UserError, match=pattern) as error:
    sources.make_source(_tfds_config(data_dir))
  assert "\n" not in str(error.value)


def test_changed_bytes_in_a_tfds_record_end_the_read_with_one_line(corpus_source, cache_dir, tmp_path):
  del corpus_source
  data_dir, version_dir = _corpus_copy(cache_dir, tmp_path)
  _flip(_split_file(version_dir, "validation"))  # Same size: the check on opening passes, the record's CRC fails.
  source = sources.make_source(_tfds_config(data_dir))
  with pytest.raises(UserError, match=r"reading the validation split of pretrain_corpus failed: .*corrupted record.*"
                                      "; build it again: tfds build pretrain_corpus") as error:
    list(source.texts("validation"))
  assert "\n" not in str(error.value)


def test_a_damaged_bundled_corpus_is_moved_aside_and_prepared_again(corpus_source, cache_dir, tmp_path, capfd):
  data_dir, version_dir = _corpus_copy(cache_dir, tmp_path)
  for damage in TFDS_DAMAGES.values():  # Each is found; the last is repaired by preparing the corpus again.
    damage(version_dir)
    with pytest.raises(tfds_files.Damaged):
      tfds_files.check(tfds_files.builder("pretrain_corpus", data_dir, make=lambda: corpus.PretrainCorpus(
          data_dir=data_dir)))
  prepared = corpus.prepare(data_dir)
  tfds_files.check(prepared)
  assert prepared.info.splits["train"].num_examples == corpus_source.data_source.num_input_examples("train")
  printed = capfd.readouterr()
  assert "is damaged (its dataset_info.json is not valid" in printed.out + printed.err
  assert len([n for n in os.listdir(os.path.join(data_dir)) if n.startswith("pretrain_corpus.damaged-")]) == 1
