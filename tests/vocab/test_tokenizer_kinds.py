"""Every tokenizer kind (tokenizer.kind): round trips, the objectives' single ids, the data path, and the export
that transformers reads to the same ids."""

import itertools
import json

import numpy as np
import pytest

from pretrain import objectives, vocab as text_vocab
from pretrain.data import tasks
from pretrain.objectives import common, fim, ul2
from pretrain.vocab import pipeline as vocab
from tests.conftest import TINY

KINDS = ["sentencepiece_bpe", "wordpiece", "byte_bpe", "bytes", "byte_unigram", "words"]
LOSSLESS = ["sentencepiece_bpe", "byte_bpe", "bytes", "byte_unigram"]
HARD = ["漢字とかな、中文。한국어 텍스트", "emoji 🦓🧪👩‍🔬 and ZWJ", "runs   of spaces\t\t\ttabs \n\n\n newlines  ",
        "def f(x):\n\treturn {'a': x ** 2}  # code\n", "word " * 2000, "<extra_id_3>[MASK]<PRE> next to text"]
# Not written here: the opening of Moby-Dick (1851), in the public domain.
UNSEEN = ("Call me Ishmael. Some years ago—never mind how long precisely—having little or no money in my purse, "
          "and nothing particular to interest me on shore, I thought I would sail about a little and see the "
          "watery part of the world.")


@pytest.fixture(scope="module", params=KINDS)
def kind_vocabulary(request, corpus_source, tmp_path_factory):
  """(kind, a 1024-id vocabulary of that kind trained on 400 of the corpus's documents)."""
  kind, model_type = ("sentencepiece", "bpe") if request.param == "sentencepiece_bpe" else (request.param, "unigram")
  texts = list(itertools.islice(corpus_source.texts("train"), 400))
  path = vocab.cached_model(texts, 1024, model_type, str(tmp_path_factory.mktemp("tok")), objectives.pieces(),
                            kind=kind)
  return request.param, vocab.load(path)


@pytest.fixture(scope="module")
def corpus_documents(corpus_source):
  return list(itertools.islice(corpus_source.texts("validation"), 50))


@pytest.mark.slow
def test_round_trips(kind_vocabulary, corpus_documents):
  kind, vocabulary = kind_vocabulary
  for text in [*corpus_documents, *HARD]:
    ids = vocabulary.encode(text)
    if kind in LOSSLESS:
      assert vocabulary.decode(ids) == text
      if kind != "sentencepiece_bpe":  # SentencePiece counts a space before the text (vocab.bytes_per_id).
        assert vocab.bytes_per_id(vocabulary)[ids].sum() == len(text.encode()) - sum(
            len(t.encode()) for t in ("<extra_id_3>", "[MASK]", "<PRE>") if t in text)
    elif kind == "words":  # One space between words; a line break is EOS, which decoding leaves out.
      assert vocabulary.encode(vocabulary.decode([i for i in ids if i != vocabulary.eos_id])) == [
          i for i in ids if i != vocabulary.eos_id]
    else:  # WordPiece drops white space: its decoding tokenizes as the text did.
      assert vocabulary.encode(vocabulary.decode(ids)) == ids
  if kind == "wordpiece":
    assert vocabulary.decode(vocabulary.encode("a  b\tc\n\nd")) == "a b c d"


def test_special_tokens_and_sentinels_are_single_ids(kind_vocabulary):
  _, vocabulary = kind_vocabulary
  special = objectives.pieces()
  ids = [vocab.single_piece_id(vocabulary, token) for token in special]
  assert ids == list(range(3, 3 + len(special)))
  assert vocab.first_regular_id(vocabulary) == 3 + len(special)
  assert [vocabulary.decode([i]) for i in ids] == list(special)
  assert vocabulary.vocab_size == (3 + len(special) + 256 + 100 if kind_vocabulary[0] == "bytes" else 1024)
  assert vocabulary.encode("<extra_id_0>") == [vocab.sentinel_id(vocabulary, 0)] == [vocabulary.vocab_size - 1]
  assert (vocabulary.pad_id, vocabulary.eos_id, vocabulary.unk_id) == (0, 1, 2)


def test_the_tensorflow_path_gives_the_python_ids(kind_vocabulary):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  _, vocabulary = kind_vocabulary
  for text in HARD:
    assert vocabulary.encode_tf(tf.constant(text)).numpy().tolist() == vocabulary.encode(text)
  ids = tf.constant([vocabulary.encode(HARD[0]) + [1, 0, 0]])
  assert vocabulary.decode_tf(ids).numpy().tolist() == [vocabulary.decode(ids[0].numpy().tolist()).encode()]


@pytest.mark.parametrize("objective", ["span_corruption", "ul2", "fim"])
def test_objectives_make_their_examples(kind_vocabulary, corpus_source, objective):
  _, vocabulary = kind_vocabulary
  from tests.objectives.test_ul2_prefix_lm import _data_cfg  # pylint: disable=g-import-not-at-top
  import seqio  # pylint: disable=g-import-not-at-top
  made = objectives.make(objective, _data_cfg(), seed=0)
  lengths = {"targets": 100_000} if objective == "fim" else {"inputs": 64, "targets": 64}
  dataset = seqio.get_mixture_or_task(tasks.register(corpus_source, vocabulary, made)).get_dataset(
      lengths, split="validation", shuffle=False, seed=0)
  examples = list(itertools.islice(dataset.as_numpy_iterator(), 20))
  assert len(examples) == 20
  first_sentinel, last_sentinel = vocab.sentinel_id(vocabulary, 0), vocab.sentinel_id(vocabulary, 99)
  if objective == "span_corruption":
    assert all(((ex["inputs"] >= last_sentinel) & (ex["inputs"] <= first_sentinel)).any() for ex in examples)
  elif objective == "ul2":
    modes = {vocab.single_piece_id(vocabulary, t) for t in ul2.MODE_TOKENS.values()}
    assert all(int(ex["inputs"][0]) in modes for ex in examples)
  else:
    pieces = {vocab.single_piece_id(vocabulary, t) for t in fim.FIM_TOKENS}
    assert any(pieces <= set(ex["targets"].tolist()) for ex in examples)
  assert common.sentence_ends(vocabulary).terminal.any()


def _read_without_tensorflow_as_seqio_reads(vocabulary):
  plain = text_vocab.load(vocabulary.file, vocabulary.extra_ids)
  assert (plain.kind, plain.workdir_name, plain.identity, plain.extra_ids, plain.vocab_size) == (
      vocabulary.kind, vocabulary.workdir_name, vocabulary.identity, vocabulary.extra_ids, vocabulary.vocab_size)
  assert (plain.pad_id, plain.eos_id, plain.unk_id) == (vocabulary.pad_id, vocabulary.eos_id, vocabulary.unk_id)
  assert plain.piece_bytes == vocabulary.piece_bytes
  for text in [*HARD, UNSEEN, "<extra_id_0> and <extra_id_7>"]:
    ids = plain.encode(text)
    assert ids == vocabulary.encode(text)
    # Decoding stops after the first EOS; ids past the vocabulary read as unknown.
    for row in (ids, ids[:5] + [1] + ids[5:], [vocabulary.vocab_size + 3, *ids[:4], 0, 0]):
      assert plain.decode(row) == vocabulary.decode(row)


def test_generate_and_export_read_the_vocabulary_without_tensorflow_as_the_pipeline_does(kind_vocabulary):
  _read_without_tensorflow_as_seqio_reads(kind_vocabulary[1])


@pytest.mark.slow
def test_a_sentencepiece_unigram_vocabulary_reads_without_tensorflow_as_the_pipeline_does(vocabulary):
  _read_without_tensorflow_as_seqio_reads(vocabulary)


def test_a_tokenizer_json_of_another_kind_is_refused(vocabulary, tmp_path):
  """The unigram tokenizer.json a SentencePiece vocabulary exports is not a vocabulary: its .model is."""
  from pretrain.system.errors import UserError  # pylint: disable=g-import-not-at-top
  from pretrain.vocab import hf_export as hf_tokenizer  # pylint: disable=g-import-not-at-top
  hf_tokenizer.write(vocabulary, str(tmp_path), bos=False)
  with pytest.raises(UserError, match="is neither a SentencePiece model nor a tokenizer.json of the kinds wordpiece"):
    vocab.load(str(tmp_path / "tokenizer.json"))


def test_a_sentencepiece_model_of_other_ids_is_named_as_one(corpus_documents, tmp_path):
  """sentencepiece's default ids (unk 0, bos 1, eos 2, no pad), as Llama's: it was called no SentencePiece model."""
  import io  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  from pretrain.system.errors import UserError  # pylint: disable=g-import-not-at-top
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus_documents[:100]), model_writer=model, vocab_size=300,
                                 minloglevel=2, logstream=open(os.devnull, "w"))
  (tmp_path / "default.model").write_bytes(model.getvalue())
  with pytest.raises(UserError, match=r"is a SentencePiece model with pad/eos/unk ids \(-1, 2, 0\), not \(0, 1, 2\) "
                                      r".*train it again with pad_id=0 eos_id=1 unk_id=2 bos_id=-1"):
    vocab.load(str(tmp_path / "default.model"))


def test_a_vocabulary_pickles_and_compares(kind_vocabulary):
  import pickle  # pylint: disable=g-import-not-at-top
  _, vocabulary = kind_vocabulary
  copy = pickle.loads(pickle.dumps(vocabulary))
  assert copy == vocabulary and copy.encode(UNSEEN) == vocabulary.encode(UNSEEN)


def test_a_cached_tokenizer_that_is_damaged_is_trained_again(tmp_path, corpus_source):
  texts = list(itertools.islice(corpus_source.texts("train"), 100))
  path = vocab.cached_model(texts, 600, "unigram", str(tmp_path), objectives.pieces(), kind="byte_bpe")
  with open(path, "r+b") as f:
    f.truncate(100)
  assert vocab.cached_model(texts, 600, "unigram", str(tmp_path), objectives.pieces(), kind="byte_bpe") == path
  assert text_vocab.kind_of(open(path, "rb").read()).name == "byte_bpe"


# Where an export has read text otherwise than the run's vocabulary: spaces before, after and in runs, tabs,
# newlines, unicode, digits, and the text of special tokens (SentencePiece spells '</s>', '<pad>' and '<unk>';
# its sentinels are '▁<extra_id_N>', matched after a space or at the start only).
EDGES = [" is not", "  two spaces", " 1234", " ", "  ", "   ", "", "The ", "trailing   ", "\ttabs\t\t", "\n", " \n ",
         "lines\n\n  indented\n", "x</s>y", "</s>", "<pad>", "<unk>", "a <pad> b </s> ", "<0x41>", "▁ ▁",
         "<extra_id_0>", " <extra_id_0>", "a <extra_id_0> b", "a  <extra_id_1>\n", "x<extra_id_0>y", "[NLU] y",
         " [MASK] ", "<PRE>x<SUF>y<MID>", "<extra_id_0> and <extra_id_99>[MASK]", "漢字 é 🙂 Ω", "0123456789 3.14"]


def _export_reads_text_id_for_id(vocabulary, bos: bool, tmp_path):
  """transformers' tokenizer of the export: our ids, alone and with the BOS (decoder-only) or EOS (T5) of
  training, on the edges, hard text and a text nobody here wrote; and our text back from them."""
  from transformers import AutoTokenizer  # pylint: disable=g-import-not-at-top
  from pretrain.vocab import hf_export  # pylint: disable=g-import-not-at-top
  hf_export.write(vocabulary, str(tmp_path), bos)
  theirs = AutoTokenizer.from_pretrained(str(tmp_path))
  for text in [*EDGES, *HARD[:4], UNSEEN]:
    ours = vocabulary.encode(text)
    assert theirs(text, add_special_tokens=False)["input_ids"] == ours, text
    assert theirs(text)["input_ids"] == ([0, *ours] if bos else [*ours, 1]), text
    # Ours leaves out padding and stops at EOS (a tokenizers kind's '</s>', the words kind's line break).
    text_ids = [i for i in ours if i not in (vocabulary.pad_id, vocabulary.eos_id)]
    assert theirs.decode(text_ids) == vocabulary.decode(text_ids), text


@pytest.mark.parametrize("bos", [True, False], ids=["llama", "t5"])
def test_the_export_reads_text_id_for_id(kind_vocabulary, bos, tmp_path):
  _export_reads_text_id_for_id(kind_vocabulary[1], bos, tmp_path)


def test_the_export_of_a_sentencepiece_unigram_vocabulary_reads_text_id_for_id(vocabulary, tmp_path):
  _export_reads_text_id_for_id(vocabulary, False, tmp_path)


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_the_export_of_a_user_s_sentencepiece_model_reads_text_as_its_normaliser_does(corpus_documents, model_type,
                                                                                      tmp_path):
  """A SentencePiece model trained with SentencePiece's own defaults (nmt_nfkc: full-width and compatibility
  characters folded; spaces removed at the ends and in runs) and the project's ids: the export reads text as it
  does, not as the project's identity normaliser would."""
  import io  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus_documents[:300]), model_writer=model, vocab_size=400,
                                 model_type=model_type, pad_id=0, eos_id=1, unk_id=2, bos_id=-1, byte_fallback=True,
                                 minloglevel=2, logstream=open(os.devnull, "w"))
  (tmp_path / "user.model").write_bytes(model.getvalue())
  user = vocab.load(str(tmp_path / "user.model"))
  assert user.encode("  two  spaces") == user.encode("two spaces") and user.encode("ｆｉ") == user.encode("fi")
  (tmp_path / "export").mkdir()
  _export_reads_text_id_for_id(user, False, tmp_path / "export")


@pytest.mark.slow
def test_a_run_trains_with_a_tokenizers_kind_and_exports_and_imports_it(run_train, tmp_path):
  """A decoder-only run with byte-level BPE: the workdir keeps tokenizer.json; its export tokenizes as the run did
  on a text nobody here wrote; importing the export gives the run's vocabulary back."""
  from transformers import AutoTokenizer  # pylint: disable=g-import-not-at-top
  from pretrain import cli, hf, run as run_lib  # pylint: disable=g-import-not-at-top
  kind, workdir = "byte_bpe", tmp_path / "run"
  result = run_train(workdir, f"--config.tokenizer.kind={kind}", "--config.train.steps=2",
                     "--config.tokenizer.vocab_size=1024")
  assert result.returncode == 0, result.stderr[-3000:]
  assert (workdir / "tokenizer.json").exists() and not (workdir / "spm.model").exists()
  run, params, _ = run_lib.load(str(workdir))
  assert run.vocabulary.kind == kind
  hf.export(str(tmp_path / "hf"), run, params)
  theirs = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
  assert theirs(UNSEEN)["input_ids"] == [0, *run.vocabulary.encode(UNSEEN)]
  assert theirs.decode(theirs(UNSEEN)["input_ids"], skip_special_tokens=True) == run.vocabulary.decode(
      run.vocabulary.encode(UNSEEN))
  with open(tmp_path / "hf" / "tokenizer_config.json") as f:
    assert json.load(f)["extra_ids"] == 100
  imported = hf.import_config(cli.parse_command_line(__import__("argparse").ArgumentParser(), [
      "--config=configs/quickstart.py", *TINY])[1], str(tmp_path / "hf"))
  again = vocab.load(imported.tokenizer.path, imported.tokenizer.extra_ids)
  assert again.vocab_size == run.vocabulary.vocab_size and again.encode(UNSEEN) == run.vocabulary.encode(UNSEEN)
  assert np.array_equal(vocab.bytes_per_id(again), vocab.bytes_per_id(run.vocabulary))
