"""MLM, FIM and BART noising."""

import itertools

import numpy as np
import tensorflow as tf

from pretrain import configs, families as family, objectives
from pretrain.data import tasks
from pretrain.objectives import bart, common, fim, mlm
from pretrain.vocab import pipeline as vocab
from tests.conftest import task_examples


def _examples(source, vocabulary, name, lengths, num, split="train", **overrides):
  return task_examples(source, vocabulary, name, lengths, split=split, num=num, **overrides)


def test_mlm_proportions(corpus_source, vocabulary):
  examples = _examples(corpus_source, vocabulary, "mlm", {"inputs": 128, "targets": 128, "weights": 128}, 850)
  inputs, targets, weights = (np.concatenate([ex[k] for ex in examples]) for k in ("inputs", "targets", "weights"))
  assert len(targets) > 100_000
  selected = weights == 1
  assert abs(selected.mean() - 0.15) < 0.005
  mask_id = vocab.single_piece_id(vocabulary, mlm.MASK_TOKEN)
  masked = (inputs == mask_id) & selected
  kept = (inputs == targets) & selected
  replaced = selected & ~masked & ~kept
  n = selected.sum()
  for share, expected in ((masked.sum() / n, 0.8), (replaced.sum() / n, 0.1), (kept.sum() / n, 0.1)):
    assert abs(share - expected) < 4 * np.sqrt(expected * (1 - expected) / n)
  assert (inputs[~selected] == targets[~selected]).all()
  assert (inputs[replaced] >= 3 + len(objectives.pieces())).all()


def test_mlm_rows_separate_documents_by_an_eos_that_is_never_masked(corpus_source, vocabulary):
  """Rows join the documents with EOS between them (RoBERTa's FULL-SENTENCES separator), so that a row that spans
  two documents says where one ends; the separator is never selected."""
  examples = _examples(corpus_source, vocabulary, "mlm", {"inputs": 128, "targets": 128, "weights": 128}, 200)
  targets, inputs, weights = (np.concatenate([ex[k] for ex in examples]) for k in ("targets", "inputs", "weights"))
  eos = targets == vocabulary.eos_id
  assert eos.sum() > 50 and not weights[eos].any() and (inputs[eos] == vocabulary.eos_id).all()
  between = np.split(targets, np.flatnonzero(eos) + 1)[1:-1]  # Each whole document, with its EOS.
  texts = set(itertools.islice(corpus_source.texts("train"), 2000))
  assert sum(vocabulary.decode(d[:-1].tolist()) in texts for d in between) >= 0.9 * len(between)


def test_fim_rearranges_and_reconstructs(corpus_source, vocabulary):
  pre, suf, mid = (vocab.single_piece_id(vocabulary, t) for t in fim.FIM_TOKENS)
  # Long enough that no document is cut: each example is one whole document.
  examples = _examples(corpus_source, vocabulary, "fim", {"targets": 100_000}, 400)
  documents = list(itertools.islice(corpus_source.texts("train"), 400))
  kinds = []
  for example, document in zip(examples, documents):
    tokens = example["targets"].tolist()
    assert tokens[-1] == vocab.EOS_ID
    tokens = tokens[:-1]
    if tokens[:2] == [pre, suf]:  # SPM: <PRE> <SUF> suffix <MID> prefix middle
      suffix, prefix_middle = tokens[2:tokens.index(mid)], tokens[tokens.index(mid) + 1:]
      kinds.append("spm")
      rebuilt = prefix_middle + suffix
    elif tokens[:1] == [pre]:  # PSM: <PRE> prefix <SUF> suffix <MID> middle
      prefix, suffix, middle = (tokens[1:tokens.index(suf)], tokens[tokens.index(suf) + 1:tokens.index(mid)],
                                tokens[tokens.index(mid) + 1:])
      kinds.append("psm")
      rebuilt = prefix + middle + suffix
    else:
      kinds.append("plain")
      rebuilt = tokens
    assert vocabulary.decode(rebuilt) == document
  fim_share = 1 - kinds.count("plain") / len(kinds)
  assert abs(fim_share - 0.5) < 0.1 and abs(kinds.count("spm") / (len(kinds) * fim_share) - 0.5) < 0.12


def _noise(tokens, **spec):
  terminal = np.array([i % 10 == 9 for i in range(200)])  # Ids 9, 19, ... end sentences, whatever follows.
  ends = common.SentenceEnds(terminal, terminal, np.zeros(200, bool), np.zeros(200, bool))
  out = bart.noise(tf.constant(tokens, tf.int32), tf.constant([1, 2], tf.int64), bart.BartNoise(**spec), ends,
                   mask_id=5)
  return out.numpy().tolist()


TOKENS = np.random.default_rng(0).integers(10, 200, 400).tolist()
OFF = dict(permute_sentences=False, rotate=False, mask_rate=0.0, delete_rate=0.0, infilling_rate=0.0)


def _is_subsequence(short, long):
  it = iter(long)
  return all(t in it for t in short)


def test_bart_sentence_permutation_keeps_the_tokens():
  out = _noise(TOKENS, **{**OFF, "permute_sentences": True})
  assert sorted(out) == sorted(TOKENS) and out != TOKENS


def test_bart_cuts_sentences_where_sentence_pairs_do(corpus_source, vocabulary):
  ends = common.sentence_ends(vocabulary)
  for text in itertools.islice(corpus_source.texts("validation"), 40):
    tokens = np.array(vocabulary.encode(text), np.int32)
    in_tf = np.flatnonzero(bart.sentence_end_mask(tf.constant(tokens), ends).numpy()) + 1
    np.testing.assert_array_equal(in_tf, ends.after(tokens))


def test_bart_rotation():
  out = _noise(TOKENS, **{**OFF, "rotate": True})
  assert out != TOKENS and any(out[k:] + out[:k] == TOKENS for k in range(len(out)))


def test_bart_masking_and_deletion():
  masked = _noise(TOKENS, **{**OFF, "mask_rate": 0.2})
  assert len(masked) == len(TOKENS) and all(m in (t, 5) for m, t in zip(masked, TOKENS)) and 5 in masked
  deleted = _noise(TOKENS, **{**OFF, "delete_rate": 0.2})
  assert 0.6 * len(TOKENS) < len(deleted) < len(TOKENS) and _is_subsequence(deleted, TOKENS)


def test_bart_text_infilling():
  out = _noise(TOKENS, **{**OFF, "infilling_rate": 0.3})
  kept = [t for t in out if t != 5]
  assert len(kept) == len(TOKENS) - round(len(TOKENS) * 0.3)
  assert _is_subsequence(kept, TOKENS)
  spans = out.count(5)
  assert 0.5 * 120 / 3 < spans < 2 * 120 / 3  # Poisson(3) spans covering 120 tokens.


def test_bart_examples_target_the_original(corpus_source, vocabulary):
  examples = _examples(corpus_source, vocabulary, "bart", {"inputs": 64, "targets": 64}, 30)
  text = vocabulary.decode(sum((ex["targets"][:-1].tolist() for ex in examples), []))
  assert text in " ".join(corpus_source.texts("train"))
  mask_id = vocab.single_piece_id(vocabulary, mlm.MASK_TOKEN)
  assert all(len(ex["inputs"]) <= 64 and mask_id in ex["inputs"] for ex in examples)


def test_mlm_batches_for_the_encoder(corpus_source, vocabulary):
  from pretrain.data import replay  # pylint: disable=g-import-not-at-top
  data_cfg = configs.load("quickstart").data
  name = tasks.register(corpus_source, vocabulary, objectives.make("mlm", data_cfg, seed=0))
  batch = next(replay.batches(name, "validation", {"inputs": 128, "targets": 128, "weights": 128}, 8,
                                family.ENCODER_ONLY, shuffle=False, seed=0, repeat=False))
  assert set(batch) == {"encoder_input_tokens", "encoder_target_tokens", "encoder_loss_weights",
                        "encoder_segment_ids", "encoder_positions"}
  weights, segments = batch["encoder_loss_weights"], batch["encoder_segment_ids"]
  assert weights.shape == (8, 128) and (weights[segments == 0] == 0).all()
  assert abs(weights.sum() / (segments > 0).sum() - 0.15) < 0.03
  unmasked = weights == 0
  np.testing.assert_array_equal(batch["encoder_input_tokens"][unmasked], batch["encoder_target_tokens"][unmasked])
