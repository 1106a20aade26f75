import gzip
import itertools
import json
import os
import re

import ml_collections
import pytest

from pretrain.data import corpus, sources
from pretrain.system import data_cache
from pretrain.system.errors import UserError


def _files_cfg(**kwargs):
  base = {"source": "files", "train_files": "", "validation_files": "", "text_key": "text", "cache_dir": "",
          "bad_records": "error"}
  return ml_collections.ConfigDict({**base, **kwargs})


def test_a_data_cache_on_an_object_store_is_refused_before_any_work(monkeypatch, tmp_path):
  # Its entries are built under OS file locks and read by local readers, so no source is prepared there.
  monkeypatch.chdir(tmp_path)
  monkeypatch.delenv("PRETRAIN_CACHE", raising=False)
  refused = r"data cache must be a directory of a mounted file system, not gs://bucket/cache \(data.cache_dir"
  with pytest.raises(UserError, match=refused):
    sources.make_source(ml_collections.ConfigDict({"source": "corpus", "cache_dir": "gs://bucket/cache"}))
  monkeypatch.setenv("PRETRAIN_CACHE", "gs://bucket/env")
  with pytest.raises(UserError, match="not gs://bucket/env"):
    sources.make_source(ml_collections.ConfigDict({"source": "corpus", "cache_dir": ""}))
  assert not list(tmp_path.iterdir())  # Nothing made here either (a local folder named "gs:").
  monkeypatch.setenv("PRETRAIN_CACHE", str(tmp_path / "cache"))
  assert data_cache.cache_dir(ml_collections.ConfigDict({"cache_dir": ""})) == str(tmp_path / "cache")


@pytest.fixture
def doc_files(tmp_path, corpus_source):
  # Real text, one line per document so that it also fits a .txt file.
  docs = [" ".join(text.split()) for text in itertools.islice(corpus_source.texts("train"), 400)]
  with open(tmp_path / "a.jsonl", "w") as f:
    for doc in docs[:200]:
      f.write(json.dumps({"text": doc, "id": 1}) + "\n")
  (tmp_path / "b.txt").write_text("\n".join(docs[200:]) + "\n\n")
  return tmp_path, docs


def test_files_hold_out_a_deterministic_validation_split(doc_files):
  path, docs = doc_files
  source = sources.make_source(_files_cfg(train_files=f"{path}/*"))
  train, validation = list(source.texts("train")), list(source.texts("validation"))
  assert sorted(train + validation) == sorted(docs)
  assert 0 < len(validation) < len(train) / 5
  assert validation == list(sources.make_source(_files_cfg(train_files=f"{path}/*")).texts("validation"))


def test_files_with_a_validation_glob(doc_files):
  path, docs = doc_files
  source = sources.make_source(_files_cfg(train_files=f"{path}/*.jsonl", validation_files=f"{path}/*.txt"))
  assert list(source.texts("train")) == docs[:200]
  assert list(source.texts("validation")) == docs[200:]
  # A file whose name holds brackets, given by its name: glob reads [1] as a set of characters and matches nothing.
  (path / "b.txt").rename(path / "b[1].txt")
  source = sources.make_source(_files_cfg(train_files=f"{path}/*.jsonl", validation_files=f"{path}/b[1].txt"))
  assert list(source.texts("validation")) == docs[200:]


def test_a_glob_of_folders_at_any_depth_and_validation_files_the_train_glob_also_matches(doc_files, capsys):
  """`**` matches any depth of folders (Python's glob reads it as `*` unless told otherwise, and left out the
  top folder's files and the deeper ones), and a validation file in the train glob's folder is not trained on."""
  path, docs = doc_files
  (path / "deeper" / "still").mkdir(parents=True)
  (path / "b.txt").rename(path / "deeper" / "still" / "b.txt")
  source = sources.make_source(_files_cfg(train_files=f"{path}/**/*.txt", validation_files=f"{path}/*.jsonl"))
  assert list(source.texts("train")) == docs[200:] and list(source.texts("validation")) == docs[:200]
  source = sources.make_source(_files_cfg(train_files=f"{path}/**", validation_files=f"{path}/a.jsonl"))
  assert list(source.texts("train")) == docs[200:] and list(source.texts("validation")) == docs[:200]
  capsys.readouterr()
  source = sources.make_source(_files_cfg(train_files=f"{path}/a.jsonl", validation_files=f"{path}/*.jsonl"))
  assert list(source.texts("train")) == docs[:200]  # Only validation files, by name: trained on, and said so.
  assert "warning: data.validation_files='" in capsys.readouterr().out
  (path / "blank.txt").write_text("\n  \n\n")
  (path / "blank.jsonl").write_text('{"text": ""}\n{"text": "  "}\n')
  with pytest.raises(UserError, match=r"data.train_files='.*/blank\.\*' holds no documents \(its 2 files have only"):
    sources.make_source(_files_cfg(train_files=f"{path}/blank.*"))


def test_compressed_files_read_as_their_text(doc_files, tmp_path_factory):
  path, docs = doc_files
  packed = tmp_path_factory.mktemp("gz")
  for name in ("a.jsonl", "b.txt"):
    (packed / f"{name}.gz").write_bytes(gzip.compress((path / name).read_bytes()))
  source = sources.make_source(_files_cfg(train_files=f"{packed}/*.gz"))
  assert sorted(list(source.texts("train")) + list(source.texts("validation"))) == sorted(docs)
  (packed / "cut.txt.gz").write_bytes(gzip.compress(b"some words\n" * 100)[:40])
  with pytest.raises(UserError, match=r"cut.txt.gz cannot be read as gzip-compressed text"):
    sources.make_source(_files_cfg(train_files=f"{packed}/cut.txt.gz"))
  (packed / "plain.jsonl.gz").write_bytes((path / "a.jsonl").read_bytes())  # Named .gz, not compressed.
  with pytest.raises(UserError, match=r"plain.jsonl.gz cannot be read as gzip-compressed text"):
    sources.make_source(_files_cfg(train_files=f"{packed}/plain.jsonl.gz"))


HARD_WRAPPED = ("The first paragraph, wrapped\nat a few words\nper line.\n\n  \nThe second one,\nalso wrapped.\n\n"
                "The third.\n")


@pytest.mark.parametrize("mode, expected", [
    ("line", ["The first paragraph, wrapped", "at a few words", "per line.", "The second one,", "also wrapped.",
              "The third."]),
    ("paragraph", ["The first paragraph, wrapped\nat a few words\nper line.", "The second one,\nalso wrapped.",
                   "The third."]),
    # A whole file, its blank lines kept (they were dropped: code and prose lost their paragraph breaks).
    ("file", [HARD_WRAPPED.rstrip("\n")]),
])
def test_a_text_file_is_read_by_lines_paragraphs_or_whole(tmp_path, capsys, mode, expected):
  (tmp_path / "book.txt").write_text(HARD_WRAPPED)
  (tmp_path / "held_out.txt").write_text(HARD_WRAPPED)
  source = sources.make_source(_files_cfg(train_files=f"{tmp_path}/book.txt",
                                          validation_files=f"{tmp_path}/held_out.txt", text_documents=mode,
                                          seq_len=128))
  assert list(source.texts("validation")) == expected
  out = capsys.readouterr().out
  assert f"2 files, {2 * len(expected)} documents (a document per {mode} of the text files)" in out
  assert ("warning: the documents are short for rows of 128 tokens" in out) == (mode == "line")


@pytest.mark.parametrize("mode", ["line", "paragraph"])
def test_a_byte_order_mark_is_not_text(tmp_path, mode):
  """Some editors start a UTF-8 file with one; JSON refused it, and a text file's first document began with it."""
  (tmp_path / "a.jsonl").write_bytes(b"\xef\xbb\xbf" + b'{"text": "First."}\n{"text": "Second."}\n')
  (tmp_path / "b.txt").write_bytes(b"\xef\xbb\xbfThird.\n\nFourth.\n")
  source = sources.make_source(_files_cfg(train_files=f"{tmp_path}/a.jsonl", validation_files=f"{tmp_path}/b.txt",
                                          text_documents=mode))
  assert list(source.texts("train")) == ["First.", "Second."]
  assert list(source.texts("validation")) == ["Third.", "Fourth."]


def test_jsonl_without_the_text_field(doc_files):
  path, _ = doc_files
  with pytest.raises(UserError, match="no field 'body'.*data.text_key"):
    sources.make_source(_files_cfg(train_files=f"{path}/*.jsonl", text_key="body"))


BAD_RECORDS = [  # (file name, a bad line, what the error says about it)
    ("bad.jsonl", b"{not json\n", "the record is not JSON"),
    ("bad.jsonl", b'{"id": 3}\n', "the record has no field 'text' (it has ['id'])"),
    ("bad.jsonl", b'{"text": null}\n', "the record holds null in 'text', not text"),
    ("bad.jsonl", b'{"text": 12}\n', "the record holds int in 'text', not text"),
    ("bad.jsonl", b'{"text": ["a", "b"]}\n', "the record holds list in 'text', not text"),
    ("bad.jsonl", b'["a list"]\n', "the record is a JSON list, not an object"),
    ("bad.jsonl", b'{"text": "caf\xe9"}\n', "the record is not UTF-8 text (byte 0xe9"),
    ("bad.txt", b"caf\xe9 au lait\n", "the record is not UTF-8 text (byte 0xe9 at column 4)"),
    ("bad.txt", b"\x7fELF\x00\x01\x02\n", "the record holds NUL bytes: a binary file given as text"),
]


def test_records_of_empty_text_are_left_out_and_counted(tmp_path, capsys):
  """A JSONL record whose text is '' or white space is no document, and no bad record: it went uncounted."""
  lines = [{"text": "A good document."}, {"text": ""}, {"text": "   "}, {"text": "Another one."}]
  (tmp_path / "a.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines) + "\n")
  source = sources.make_source(_files_cfg(train_files=f"{tmp_path}/a.jsonl"))
  assert f"Leaving out 2 records whose 'text' is empty or white space: {tmp_path}/a.jsonl:2, {tmp_path}/a.jsonl:3" in \
      capsys.readouterr().out
  assert sorted([*source.texts("train"), *source.texts("validation")]) == ["A good document.", "Another one."]


@pytest.mark.parametrize("name, line, message", BAD_RECORDS)
def test_bad_records_name_their_file_and_line_or_are_skipped_and_counted(tmp_path, name, line, message, capsys):
  good = (json.dumps({"text": "A good document."}) + "\n").encode() if name.endswith("jsonl") else b"A good line.\n"
  (tmp_path / name).write_bytes(good + good + line + good)
  with pytest.raises(UserError, match=f"{name}:3: {re.escape(message)}.*data.bad_records=skip"):
    sources.make_source(_files_cfg(train_files=f"{tmp_path}/{name}"))
  source = sources.make_source(_files_cfg(train_files=f"{tmp_path}/{name}", bad_records="skip"))
  assert f"leaving out 1 bad records: {tmp_path}/{name}:3" in capsys.readouterr().out
  texts = list(source.texts("train")) + list(source.texts("validation"))
  assert len(texts) == 3 and set(texts) == {"A good document." if name.endswith("jsonl") else "A good line."}


def test_tfds_dataset_by_name_and_version(cache_dir, corpus_source):
  del corpus_source  # Prepared the dataset in cache_dir/tfds.
  cfg = ml_collections.ConfigDict({"source": "tfds", "tfds_name": f"pretrain_corpus:{corpus.PretrainCorpus.VERSION}",
                                   "tfds_data_dir": f"{cache_dir}/tfds", "train_split": "train",
                                   "validation_split": "validation", "text_key": "text"})
  source = sources.make_source(cfg)
  assert source.name == "pretrain_corpus" and next(source.texts("validation"))
  # Curated, a slice of a split is curated and stored apart from the whole split (the dataset's content is one).
  curated = [sources.make_source(ml_collections.ConfigDict({**cfg.to_dict(), "train_split": split,
                                                             "filters": "words=5:100000", "dedup": "",
                                                             "dedup_threshold": 0.8, "cache_dir": cache_dir}))
             for split in ("train", "train[:50%]")]
  assert curated[0].curation.directory != curated[1].curation.directory
  assert curated[0].content != curated[1].content  # Which names the token store.
  cfg.validation_split = "test"
  with pytest.raises(UserError, match="has no split 'test'"):
    sources.make_source(cfg)
  cfg.validation_split = "validation"
  cfg.tfds_name = "pretrain_corpus"  # seqio's traceback before: 'TFDS name must contain a version number'.
  with pytest.raises(UserError, match=f"has no version; give NAME:VERSION, e.g. pretrain_corpus:"
                                      f"{re.escape(str(corpus.PretrainCorpus.VERSION))}"):
    sources.make_source(cfg)
  cfg.tfds_name = f"pretrain_corpus:{corpus.PretrainCorpus.VERSION}"
  cfg.tfds_data_dir = f"{cache_dir}/nowhere"  # It was called an unknown dataset.
  with pytest.raises(UserError, match="data.tfds_data_dir=.*nowhere' is not a directory"):
    sources.make_source(cfg)
  os.makedirs(f"{cache_dir}/empty", exist_ok=True)
  cfg.tfds_data_dir = f"{cache_dir}/empty"
  with pytest.raises(UserError, match="not prepared"):
    sources.make_source(cfg)


def test_a_tfds_task_reads_the_splits_the_config_names(cache_dir, corpus_source, vocabulary):
  """data.validation_split=train[:1%]: the task's validation split (training's evaluation) is that slice, as the
  token store's is; it read the dataset's own validation split, or failed where the dataset has none."""
  import seqio  # pylint: disable=g-import-not-at-top
  from pretrain import configs, objectives  # pylint: disable=g-import-not-at-top
  from pretrain.data import tasks  # pylint: disable=g-import-not-at-top
  cfg = ml_collections.ConfigDict({"source": "tfds", "tfds_name": f"pretrain_corpus:{corpus.PretrainCorpus.VERSION}",
                                   "tfds_data_dir": f"{cache_dir}/tfds", "train_split": "train[1%:]",
                                   "validation_split": "train[:1%]", "text_key": "text"})
  source = sources.make_source(cfg)
  name = tasks.register(source, vocabulary, objectives.make("clm", configs.load("quickstart").data, 0))
  task_source = seqio.get_mixture_or_task(name).source
  assert isinstance(task_source, seqio.TfdsDataSource)  # Read by TFDS's files: each host its own (shard_info).
  read = task_source.get_dataset("validation", shuffle=False)
  first = next(read.as_numpy_iterator())["text"].decode()
  assert first == next(source.texts("validation")) != next(corpus_source.texts("validation"))


@pytest.mark.slow
def test_train_on_files_with_a_trained_tokenizer(doc_files, run_train, run_pretrain, tmp_path):
  path, _ = doc_files
  model = tmp_path / "tok" / "spm.model"
  made = run_pretrain("train-tokenizer", f"--out={model}", "--config.data.source=files",
                      f"--config.data.train_files={path}/*", "--config.tokenizer.vocab_size=1000")
  assert made.returncode == 0, made.stderr
  assert "<extra_id_0> = 999" in made.stdout
  run = run_train(tmp_path / "run", "--config.data.source=files", f"--config.data.train_files={path}/*",
                  f"--config.tokenizer.path={model}", "--config.tokenizer.vocab_size=1000",
                  "--config.train.steps=2")
  assert run.returncode == 0, run.stderr
  assert "Trained 2 steps" in run.stdout
