import itertools
import os
import random

import pytest

from pretrain import objectives
from pretrain.system.errors import UserError
from pretrain.vocab import kinds, pipeline as vocab


def test_special_ids(vocabulary):
  assert vocabulary.vocab_size == 4096
  assert (vocabulary.pad_id, vocabulary.eos_id, vocabulary.unk_id) == (0, 1, 2)
  tokenizer = vocabulary.tokenizer
  assert tokenizer.id_to_piece(0) == "<pad>" and tokenizer.id_to_piece(1) == "</s>"


def test_sentinels_count_down_from_the_top(vocabulary):
  for index in (0, 1, 99):
    sentinel = vocab.sentinel_id(vocabulary, index)
    assert sentinel == 4095 - index
    assert vocabulary.decode([sentinel]) == f"<extra_id_{index}>"
  assert vocabulary.encode("<extra_id_0>") [-1] == 4095


@pytest.mark.parametrize("token", objectives.pieces())
def test_special_tokens_are_single_pieces(vocabulary, token):
  token_id = vocab.single_piece_id(vocabulary, token)
  assert 3 <= token_id < 4096 - vocab.EXTRA_IDS
  assert vocabulary.decode([token_id]) == token


@pytest.mark.parametrize("text", ["Return the number of items in a container.", 'Split on "\\t" ≠ ✓ 漢字',
                                  "def f(x):\n    return  x\n\n\tdone "])
def test_round_trip_without_unknowns(vocabulary, text):
  ids = vocabulary.encode(text)
  assert vocab.UNK_ID not in ids
  assert vocabulary.decode(ids) == text


def test_cached_by_content(tmp_path, corpus_source):
  texts = list(itertools.islice(corpus_source.texts("train"), 300))
  first = vocab.cached_model(texts, 700, "unigram", str(tmp_path), objectives.pieces())
  modified = os.path.getmtime(first)
  assert vocab.cached_model(list(texts), 700, "unigram", str(tmp_path), objectives.pieces()) == first
  assert os.path.getmtime(first) == modified, "not trained again"
  assert vocab.cached_model(texts[1:], 700, "unigram", str(tmp_path), objectives.pieces()) != first
  assert vocab.load(first).vocab_size == 700
  # With the texts' identity, a second call reads none of them and finds the same file; a changed identity reads.
  read = []
  counted = lambda: (read.append(t) or t for t in texts)
  assert vocab.cached_model(counted(), 700, "unigram", str(tmp_path), objectives.pieces(), identity="a") == first
  assert vocab.cached_model(counted(), 700, "unigram", str(tmp_path), objectives.pieces(), identity="a") == first
  assert len(read) == len(texts)
  assert vocab.cached_model(counted(), 700, "unigram", str(tmp_path), objectives.pieces(), identity="b") == first
  assert len(read) == 2 * len(texts)


def test_missing_or_invalid_file(tmp_path):
  with pytest.raises(UserError, match="does not exist"):
    vocab.load(str(tmp_path / "missing.model"))
  bad = tmp_path / "bad.model"
  bad.write_text("not a model")
  with pytest.raises(UserError, match="is neither a SentencePiece model nor a tokenizer.json"):
    vocab.load(str(bad))


def test_a_missing_vocabulary_is_named_before_any_data_is_prepared(tmp_path):
  """A typo in tokenizer.path fails at once, not after the bundled corpus is prepared (a minute, once)."""
  from pretrain import run as run_lib  # pylint: disable=g-import-not-at-top
  from tests.conftest import tiny_config  # pylint: disable=g-import-not-at-top
  cfg = tiny_config(f"--config.data.cache_dir={tmp_path}", "--config.tokenizer.path=/nonexistent/spm.model")
  with pytest.raises(UserError, match="'/nonexistent/spm.model' does not exist"):
    run_lib.Run.build_with_data(cfg)
  assert not os.listdir(tmp_path)


def test_the_tensorflow_tokenizer_is_made_once_and_the_vocabulary_still_compares_and_pickles(vocabulary):
  import pickle  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  fresh = vocab.load(vocabulary.sentencepiece_model_file)
  assert fresh.tf_tokenizer is fresh.tf_tokenizer  # Made once (eagerly, quietly), shared by traced functions.
  ids = tf.function(lambda text: fresh.encode_tf(text))(tf.constant("Return the number of items."))
  assert ids.numpy().tolist() == fresh.encode("Return the number of items.")
  assert fresh == vocab.load(vocabulary.sentencepiece_model_file)  # seqio's equality: its model, not the tokenizer.
  assert pickle.loads(pickle.dumps(fresh)) == fresh


def test_a_vocabulary_file_says_its_kind_and_the_run_records_it(vocabulary, cache_dir, tmp_path, capsys):
  """tokenizer.path names a SentencePiece model, tokenizer.kind says wordpiece: the run takes the file's kind,
  says so in one line, and records it, so that a resume that gives the true kind is the same run."""
  from pretrain import config as config_lib, run as run_lib  # pylint: disable=g-import-not-at-top
  from pretrain import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from tests.conftest import tiny_config  # pylint: disable=g-import-not-at-top
  given = [f"--config.data.cache_dir={cache_dir}", f"--config.tokenizer.path={vocabulary.sentencepiece_model_file}"]
  cfg = tiny_config(*given, "--config.tokenizer.kind=wordpiece")
  assert cfg.tokenizer.kind == "sentencepiece"
  note = capsys.readouterr().err
  assert "holds a sentencepiece vocabulary" in note and "(not 'wordpiece')" in note
  (tmp_path / "checkpoints").mkdir()
  (tmp_path / "config.json").write_text(config_lib.to_json(cfg))  # As the run writes it.
  workdir_lib.check_same_model(tiny_config(*given), str(tmp_path))
  cfg.tokenizer.kind = "byte_bpe"  # A config the command line did not resolve (a gs:// path, say): the run does.
  assert run_lib.Run.build_with_data(cfg).cfg.tokenizer.kind == "sentencepiece"


def test_a_text_too_small_for_the_vocabulary_says_the_largest_size_it_takes():
  """SentencePiece's limit counts the pieces it learns; the fix names tokenizer.vocab_size, which counts the
  sentinels too (its number trains: it once sent a user to a size that was refused as too small)."""
  letters = random.Random(0)
  texts = [" ".join("".join(letters.choices("abcdefghij", k=letters.randint(2, 7))) for _ in range(12))
           for _ in range(60)]
  special = objectives.pieces()
  with pytest.raises(UserError, match=r"<= (\d+)\.\); set tokenizer.vocab_size to at most (\d+) \(the text makes "
                                      r"\1 pieces\), or give more text") as error:
    kinds.train(texts, "sentencepiece", 3996, "unigram", 100, special)
  largest = int(str(error.value).split("at most ")[1].split(" ")[0])
  assert kinds.train(texts, "sentencepiece", largest, "unigram", 100, special)
