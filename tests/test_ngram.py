"""The count-based reference models (pretrain/downstream/ngram.py) against hand computations, and their rows in
`pretrain eval --ngram`."""

import math
import re

import numpy as np
import pytest

from pretrain.commands import eval as eval_command
from pretrain.downstream import ngram

A, B, C = 0, 1, 2


def test_unigram_is_add_one():
  model = ngram.fit([np.array([A, B, C]), np.array([B, C])], 1, vocab_size=3)
  assert np.exp(model.logprobs([np.array([A, C])])) == pytest.approx([2 / 8, 3 / 8])


def test_bigram_is_interpolated_kneser_ney_by_hand():
  """Bigrams with BOS: (BOS,a) x2, (a,b), (a,c), (BOS,b); top-order discount 3 / (3 + 2) = 0.6. Continuation
  counts: a 1 (after BOS), b 2 (after a, BOS), c 1; discount 2 / (2 + 2) = 0.5; P1 = (N - 0.5 + 0.5 x 3 / 3) / 4:
  a 0.25, b 0.5, c 0.25."""
  model = ngram.fit([np.array([A, B]), np.array([A, C]), np.array([B])], 2, vocab_size=3)
  p_a_bos = (2 - 0.6 + 0.6 * 2 * 0.25) / 3
  p_b_a = (1 - 0.6 + 0.6 * 2 * 0.5) / 2
  p_b_bos = (1 - 0.6 + 0.6 * 2 * 0.5) / 3
  p_c_b = 0.25  # The history b was never seen: all of P1.
  assert np.exp(model.logprobs([np.array([A, B]), np.array([B, C])])) == pytest.approx(
      [p_a_bos, p_b_a, p_b_bos, p_c_b])


@pytest.mark.parametrize("order", [1, 2, 3])
def test_every_history_gives_a_distribution(order):
  rng = np.random.default_rng(order)
  segments = [rng.integers(0, 7, rng.integers(1, 20)) for _ in range(40)]
  model = ngram.fit(segments, order, vocab_size=7)
  for _ in range(5):
    history = list(rng.integers(0, 7, rng.integers(0, 4)))
    total = sum(math.exp(model.logprobs([np.array(history + [w])])[-1]) for w in range(7))
    assert total == pytest.approx(1.0)


def test_eval_prints_the_reference_rows(trained_run, cache_dir, monkeypatch, capsys):
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  eval_command.main([f"--workdir={trained_run}", "--task=corpus_clm", "--batches=2", "--ngram=2"])
  out = capsys.readouterr().out
  unigram, bigram = (float(re.search(rf"{name} \(counts.*bits_per_byte ([0-9.]+)", out).group(1))
                     for name in ("unigram", "bigram"))
  assert bigram < unigram < 4, out


def test_score_is_the_continuation_given_its_context():
  model = ngram.fit([np.array([A, B, C, A]), np.array([B, C])], 3, vocab_size=3)
  whole = model.logprobs([np.array([A, B, C]), np.array([C])])
  assert model.score([([A], [B, C]), ([], [C])]) == pytest.approx([whole[1] + whole[2], whole[3]])
