"""The curation stage (pretrain/data/curation.py): filters and deduplication over a real files source, decided
once, recorded, and read by everything downstream."""

import json

import ml_collections
import pytest

from pretrain.commands import inspect_data
from pretrain.data import curation, dedup, sources, token_store
from pretrain.system.errors import UserError
from tests.conftest import tiny_config


@pytest.fixture(scope="module")
def long_docs(corpus_source):
  """Real documents of at least 150 words, one paragraph each."""
  docs = (" ".join(text.split()) for text in corpus_source.texts("train"))
  return [d for d in docs if len(d.split()) >= 150][:4]


@pytest.fixture
def dirty_files(tmp_path, long_docs):
  """Train and validation JSONL files whose train split holds one document of each kind the stage removes."""
  good, other, valid, valid2 = long_docs
  words = good.split()
  near = " ".join(w if i % 100 != 50 else "changed" for i, w in enumerate(words))  # 1 or 2 words of 150+.
  assert dedup.jaccard(good, near) > 0.85
  train = {"good": good, "short": "Too short to keep.", "exact": good.upper(), "near": near,
           "validation_copy": valid, "other": other}
  (tmp_path / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in train.values()))
  (tmp_path / "validation.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in (valid, valid2)))
  return tmp_path, train, (valid, valid2)


def _data_cfg(path, cache_dir, **kwargs):
  return ml_collections.ConfigDict({
      "source": "files", "train_files": f"{path}/train.jsonl", "validation_files": f"{path}/validation.jsonl",
      "text_key": "text", "cache_dir": cache_dir, "bad_records": "error", "filters": "words=20:100000",
      "dedup": "near", "dedup_threshold": 0.8, **kwargs})


def test_each_removed_document_is_named_with_its_reason(dirty_files, tmp_path):
  path, train, validation = dirty_files
  source = sources.make_source(_data_cfg(path, str(tmp_path / "cache")))
  assert list(source.texts("train")) == [train["good"], train["other"]]
  assert list(source.texts("validation")) == list(validation)
  stage = source.curation
  assert list(stage.removed("train")) == [("words", train["short"]), ("duplicate", train["exact"]),
                                          ("near_duplicate", train["near"]),
                                          ("validation_duplicate", train["validation_copy"])]
  report = stage.report()
  assert report["train"] == {"documents": 6, "kept": 2, "removed": {
      "words": {"documents": 1}, "duplicate": {"documents": 1}, "near_duplicate": {"documents": 1},
      "validation_duplicate": {"documents": 1}}}
  assert report["validation"]["kept"] == 2 and report["filters"] == [["words", [20.0, 100000.0]]]


def test_decisions_are_taken_once_and_key_on_the_settings(dirty_files, tmp_path, monkeypatch, vocabulary):
  path, train, _ = dirty_files
  cache = str(tmp_path / "cache")
  first = sources.make_source(_data_cfg(path, cache))
  decided = first.curation.decisions()
  tokens = first.curation.report(vocabulary)["train"]["removed"]
  assert tokens["words"]["tokens"] == len(vocabulary.encode(train["short"]))

  def refuse(self):
    raise AssertionError("decided again")

  monkeypatch.setattr(curation.Curation, "_decide", refuse)
  again = sources.make_source(_data_cfg(path, cache))
  assert {k: v.tolist() for k, v in again.curation.decisions().items()} == {k: v.tolist() for k, v in decided.items()}
  assert again.identity("train") == first.identity("train")
  # Other settings are another stage: other decisions, and another token store.
  exact_only = sources.make_source(_data_cfg(path, cache, dedup="exact"))
  assert exact_only.curation.directory != first.curation.directory
  assert token_store.directory(cache, exact_only, "train", vocabulary) != token_store.directory(
      cache, first, "train", vocabulary)
  monkeypatch.undo()
  assert list(exact_only.texts("train")) == [train["good"], train["near"], train["other"]]
  # No stage: the source itself.
  plain = sources.make_source(_data_cfg(path, cache, filters="", dedup=""))
  assert plain.curation is None and len(list(plain.texts("train"))) == 6


def test_the_token_store_records_what_was_removed(dirty_files, tmp_path, vocabulary):
  path, _, _ = dirty_files
  cfg = tiny_config("--config.data.source=files", f"--config.data.train_files={path}/train.jsonl",
                    f"--config.data.validation_files={path}/validation.jsonl",
                    f"--config.data.cache_dir={tmp_path / 'cache'}", "--config.data.filters=words=20:100000",
                    "--config.data.dedup=near", f"--config.tokenizer.path={vocabulary.sentencepiece_model_file}")
  from pretrain import run as run_lib  # pylint: disable=g-import-not-at-top
  run = run_lib.Run.build_with_data(cfg)
  (task, source, _), = run.member_tasks()
  store = token_store.open_or_build(task, source, "train", run.vocabulary, str(tmp_path / "cache"))
  assert len(store) == 2
  assert store.meta["curation"]["removed"]["near_duplicate"] == {"documents": 1}


def test_inspect_data_prints_counts_and_examples(dirty_files, tmp_path, vocabulary, capsys):
  path, train, _ = dirty_files
  inspect_data.main(["--config.data.source=files", f"--config.data.train_files={path}/train.jsonl",
                     f"--config.data.validation_files={path}/validation.jsonl",
                     f"--config.data.cache_dir={tmp_path / 'cache'}", "--config.data.filters=words=20:100000",
                     "--config.data.dedup=near", f"--config.tokenizer.path={vocabulary.sentencepiece_model_file}",
                     "--num=1", "--chars=40"])
  out = capsys.readouterr().out
  assert "train: 6 documents, 2 kept (33.3%)" in out
  assert "near_duplicate" in out and "Removed by words (train):\n  - Too short to keep." in out
  assert f"  - {train['exact'][:40]} ..." in out


@pytest.mark.parametrize("setting, message", [
    ({"filters": "gopher,no_such_rule"}, "no_such_rule"),
    ({"filters": "words=50"}, "words"),
])
def test_bad_settings_are_named(dirty_files, tmp_path, setting, message):
  path, _, _ = dirty_files
  with pytest.raises(UserError, match=message) as raised:
    sources.make_source(_data_cfg(path, str(tmp_path / "cache"), **setting))
  assert "\n" not in str(raised.value)
