"""NSP and SOP sentence pairs, and MLM masking limited to candidate positions."""

import itertools

import numpy as np
import pytest
import seqio
import tensorflow as tf

from pretrain import objectives
from pretrain.objectives import common, mlm, sentence_pairs
from pretrain.system.errors import UserError
from pretrain.vocab import pipeline as vocab

LENGTH = 64


@pytest.fixture(scope="module")
def documents(corpus_source, vocabulary):
  return [np.array(vocabulary.encode(text), np.int32) for text in corpus_source.texts("train")]


@pytest.fixture(scope="module")
def ends(vocabulary):
  return common.sentence_ends(vocabulary)


def test_terminal_ids(vocabulary, ends):
  is_terminal = ends.terminal
  assert is_terminal.shape == (vocabulary.vocab_size,) and is_terminal.dtype == bool
  for text in ("It works.", "Really?", "Stop!", 'He said "yes."', "(See the notes.)"):
    ids = vocabulary.encode(text)
    assert is_terminal[ids].any(), text
    assert not is_terminal[ids[0]], text
  for text in ("Hello world", "x = 1, y = 2", "a list: one; two"):
    assert not is_terminal[vocabulary.encode(text)].any(), text
  assert not is_terminal[vocabulary.vocab_size - vocabulary.extra_ids:].any()  # Sentinels.


def test_labels_are_balanced(documents, ends):
  """Where a chunk holds two sentences or more (the others are negatives by rule)."""
  for kind in sentence_pairs.KINDS:
    labels = []
    for seed in itertools.count():
      labels += [pair.label for pair in sentence_pairs.build_pairs(documents, kind, LENGTH, ends,
                                                                  np.random.default_rng(seed))
                 if not pair.random_next]
      if len(labels) >= 10_000:
        break
    assert abs(np.mean(labels) - 0.5) < 4 * np.sqrt(0.25 / len(labels)), kind


def _text(tokens) -> str:
  """Tokens as a string of one character each, so that str.find finds token runs."""
  return "".join(map(chr, tokens))


def _follows(first: str, second: str, texts: list[str]) -> bool:
  """Whether `second` follows `first` in one document, `first` possibly cut at its end by the truncation (then
  the pair fills the budget, and `first` was cut only while the longer one)."""
  truncated_ok = len(first) + len(second) == LENGTH - 2 and len(first) + 1 >= len(second)
  for text in texts:
    p = text.find(first)
    while p >= 0:
      end = p + len(first)
      if text.startswith(second, end):
        return True
      if truncated_ok and any(text.startswith(second, end + gap) for gap in range(1, (LENGTH - 2) // 2)):
        return True
      p = text.find(first, p + 1)
  return False


def test_pairs_are_built_as_specified(documents, ends):
  texts = [_text(d) for d in documents[:300]]
  for kind in sentence_pairs.KINDS:
    pairs = sentence_pairs.build_pairs(documents[:300], kind, LENGTH, ends, np.random.default_rng(1))
    assert len(pairs) > 1000 and {pair.label for pair in pairs} == {0, 1}
    for a, b, label, random_next in pairs:
      assert len(a) >= 1 and len(b) >= 1 and len(a) + len(b) + 2 <= LENGTH
      a, b = _text(a), _text(b)
      if label == 1:
        assert _follows(a, b, texts)
      elif kind == "sop" and not random_next:
        assert _follows(b, a, texts)
      else:  # NSP negative: A in one document, B in another.
        in_a, in_b = ({i for i, text in enumerate(texts) if segment in text} for segment in (a, b))
        assert in_a and in_b and len(in_a | in_b) > 1


def _examples(documents, vocabulary, kind, length=128):
  dataset = tf.data.Dataset.from_generator(lambda: ({"targets": d} for d in documents[:400]),
                                           output_signature={"targets": tf.TensorSpec([None], tf.int32)})
  dataset = sentence_pairs.sentence_pairs(dataset, {"inputs": length, "targets": length},
                                          {"targets": seqio.Feature(vocabulary)}, seed=3, kind=kind)
  assert dataset.element_spec["inputs"].shape.as_list() == [None]
  assert dataset.element_spec["pair_label"].shape.as_list() == [1]
  return list(dataset.as_numpy_iterator())


@pytest.mark.parametrize("kind", sentence_pairs.KINDS)
def test_preprocessor(documents, vocabulary, kind):
  examples = _examples(documents, vocabulary, kind)
  assert len(examples) > 300
  mask_id = vocab.single_piece_id(vocabulary, mlm.MASK_TOKEN)
  selected = candidates = masked = 0
  for ex in examples:
    assert set(ex) == {"inputs", "targets", "weights", "pair_label"}
    inputs, targets, weights = ex["inputs"], ex["targets"], ex["weights"]
    assert all(v.dtype == np.int32 for v in ex.values())
    assert inputs.shape == targets.shape == weights.shape and len(targets) <= 128
    separators = np.flatnonzero(targets == vocabulary.eos_id)
    assert len(separators) == 2 and separators[1] == len(targets) - 1 and 0 < separators[0] < len(targets) - 2
    assert (weights[separators] == 0).all() and (inputs[separators] == vocabulary.eos_id).all()
    assert (inputs[weights == 0] == targets[weights == 0]).all()
    assert ex["pair_label"].shape == (1,) and ex["pair_label"][0] in (0, 1)
    selected += weights.sum()
    masked += (inputs[weights == 1] == mask_id).sum()
    candidates += len(targets) - 2
  assert abs(selected / candidates - 0.15) < 0.01 and 0.75 < masked / selected < 0.85
  again = _examples(documents, vocabulary, kind)
  assert len(again) == len(examples)
  for ex, other in zip(examples, again):
    for name in ex:
      np.testing.assert_array_equal(ex[name], other[name])


def test_check_documents(documents, vocabulary, ends):
  single = [np.array(vocabulary.encode(text), np.int32) for text in ("One sentence only.", "No end at all", "")]
  with pytest.raises(UserError, match="data.objective=nsp builds sentence pairs, but none of the first 3 documents"):
    sentence_pairs.check_documents(single, ends, "nsp")
  sentence_pairs.check_documents(documents[:200], ends, "sop")
  # A few one-sentence lines whose abbreviations look like sentence ends, as Penn Treebank's (its first 200 lines:
  # 54 of them), are no source of sentence pairs.
  lines = [np.array(vocabulary.encode(text), np.int32) for text in (
      "mr. vinken is chairman of elsevier n.v. the dutch publishing group", "the company said it will report",
      "shares of acme inc. rose in new york trading", "analysts expect the same")]
  with pytest.raises(UserError, match=r"but only 2 of the first 5 documents of the source hold two sentences "
                                      r"\(ending in \. ! or \?\), fewer than half"):
    sentence_pairs.check_documents([*lines, lines[1]], ends, "sop")


def test_mask_tokens_candidates():
  tokens = tf.constant(np.random.default_rng(0).integers(20, 4000, 300), tf.int32)
  seed = tf.constant([5, 7], tf.int64)
  spec = dict(rate=0.15, mask_id=9, random_ids=(10, 4000))
  plain = mlm.mask_tokens(tokens, seed, **spec)
  every = mlm.mask_tokens(tokens, seed, **spec, candidates=tf.ones([300], tf.bool))
  for name in plain:
    np.testing.assert_array_equal(plain[name], every[name])
  # The selection as it was before `candidates`.
  order = tf.argsort(tf.random.stateless_uniform([300], tf.random.experimental.stateless_split(seed, 3)[0]))
  np.testing.assert_array_equal(np.flatnonzero(plain["weights"]), np.sort(order[:45].numpy()))
  candidates = np.random.default_rng(1).random(300) < 0.3
  some = mlm.mask_tokens(tokens, seed, **spec, candidates=tf.constant(candidates))
  weights = some["weights"].numpy()
  assert weights.sum() == round(candidates.sum() * 0.15) and not weights[~candidates].any()
  np.testing.assert_array_equal(some["inputs"].numpy()[weights == 0], tokens.numpy()[weights == 0])


def test_a_source_of_one_sentence_documents_is_refused(tmp_path, corpus_source, cache_dir, vocabulary):
  """Through the run's setup (pretrain.run), before any example is built: one line naming the problem."""
  from pretrain import run as run_lib  # pylint: disable=g-import-not-at-top
  from tests.conftest import tiny_config  # pylint: disable=g-import-not-at-top
  del vocabulary  # Cached: tokenizer.path below names it.
  model = vocab.cached_model(corpus_source.texts("train", max_chars=20_000_000), 4096, "unigram", cache_dir,
                              objectives.pieces())
  (tmp_path / "docs.txt").write_text("\n".join(f"a line of words number {i} without an end" for i in range(300)))
  cfg = tiny_config("--config.data.objective=nsp", "--config.data.source=files",
                    f"--config.data.train_files={tmp_path}/docs.txt", f"--config.tokenizer.path={model}",
                    f"--config.data.cache_dir={cache_dir}")
  with pytest.raises(UserError, match="none of the first 200 documents of the source holds two sentences"):
    run_lib.Run.build_with_data(cfg)


def _sentences(vocabulary, ends, text: str) -> list[str]:
  tokens = np.array(vocabulary.encode(text), np.int32)
  return [vocabulary.decode(s.tolist()).strip() for s in sentence_pairs.sentences(tokens, ends, len(tokens))]


def test_a_sentence_ends_where_a_word_follows(vocabulary, ends):
  """Not inside an identifier, a number or an abbreviation that punctuation follows; still before a space, a
  newline, a closing quote, and at the end of the text."""
  assert len(_sentences(vocabulary, ends, "Wrap it in io.BytesIO(data) first. Then read version 3.11 (e.g., "
                                          "the docs) again.")) == 2
  assert _sentences(vocabulary, ends, 'He said "stop." Then he left!\nNew line? Yes.') == [
      'He said "stop."', "Then he left!", "New line?", "Yes."]


def test_a_one_sentence_chunk_is_a_negative_with_b_from_another_document(vocabulary, ends):
  """BERT (and ALBERT) make A of a chunk of one sentence and draw B from another document: a negative."""
  encode = lambda text: np.array(vocabulary.encode(text), np.int32)
  alone = encode("This document holds one sentence and nothing more.")
  others = [encode(f"Document {i} starts here. It goes on for a while. Then it ends.") for i in range(6)]
  for kind in sentence_pairs.KINDS:
    pairs = sentence_pairs.build_pairs([alone, *others], kind, 64, ends, np.random.default_rng(0))
    [pair] = [p for p in pairs if np.array_equal(p.a, alone)]
    assert pair.label == 0 and pair.random_next
    assert any(_text(pair.b) in _text(o) for o in others)


def test_short_seq_prob_makes_that_share_of_documents_aim_shorter(documents, ends):
  length = lambda prob: np.mean([len(p.a) + len(p.b) for p in sentence_pairs.build_pairs(
      documents[:400], "nsp", 128, ends, np.random.default_rng(0), short_seq_prob=prob)])
  full, short, some = length(0.0), length(1.0), length(0.1)
  assert short < 0.75 * full and short < some < full
