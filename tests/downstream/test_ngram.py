"""The count-based reference models (pretrain/downstream/ngram.py) against hand computations, and their rows in
`pretrain eval --ngram`."""

import collections
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


def test_bigram_is_interpolated_modified_kneser_ney_by_hand():
  """Bigrams after one BOS: (BOS,a) x2, (a,b), (a,c), (BOS,b): counts of counts n1 3, n2 1, so Y = 3 / (3 + 2) =
  0.6, D1 = 1 - 2 Y n2 / n1 = 0.6, D2 = 2 - 3 Y n3 / n2 = 2. Continuation counts: a 1 (after BOS), b 2 (after a,
  BOS), c 1: Y = 0.5, D1 = 0.5, D2 = 2; P1 = (N - D(N) + (2 D1 + D2) / 3) / 4: a 0.375, b 0.25, c 0.375."""
  model = ngram.fit([np.array([A, B]), np.array([A, C]), np.array([B])], 2, vocab_size=3)
  p1 = {A: 0.375, B: 0.25, C: 0.375}
  p_a_bos = (2 - 2 + (2 + 0.6) * p1[A]) / 3
  p_b_a = (1 - 0.6 + 2 * 0.6 * p1[B]) / 2
  p_b_bos = (1 - 0.6 + (2 + 0.6) * p1[B]) / 3
  p_c_b = p1[C]  # The history b was never seen: all of P1.
  assert np.exp(model.logprobs([np.array([A, B]), np.array([B, C])])) == pytest.approx(
      [p_a_bos, p_b_a, p_b_bos, p_c_b])


def _reference_logprobs(train, scored, order, vocab_size):
  """Interpolated modified Kneser-Ney written out with dictionaries of tuples, one token at a time (Chen & Goodman
  1999; SRILM keeps raw counts for n-grams that start at <s>)."""
  bos = "<s>"
  raw = collections.Counter()
  for segment in train:
    tokens = [bos, *segment]
    for i in range(1, len(tokens)):
      for n in range(1, order + 1):
        if i - n + 1 >= 0:
          raw[tuple(tokens[i - n + 1:i + 1])] += 1
  left = collections.defaultdict(set)
  for gram in raw:
    if len(gram) > 1:
      left[gram[1:]].add(gram[0])
  def count(gram):
    return raw[gram] if len(gram) == order or gram[0] == bos else len(left[gram])
  grams = {n: [g for g in raw if len(g) == n and count(g) > 0 and g != (bos,)] for n in range(1, order + 1)}
  discounts = {}
  for n, found in grams.items():
    c = collections.Counter(count(g) for g in found)
    y = c[1] / (c[1] + 2 * c[2]) if c[1] + c[2] else 0.5
    discounts[n] = [0.0] + [min(max(k - (k + 1) * y * c[k + 1] / c[k] if c[k] else y, 0.0), k) for k in (1, 2, 3)]
  def probability(history, token):
    p = 1.0 / vocab_size
    for n in range(1, order + 1):
      h = tuple(history[len(history) - n + 1:]) if n > 1 else ()
      if n > 1 and len(h) < n - 1:
        break
      following = [g for g in grams[n] if g[:-1] == h]
      total = sum(count(g) for g in following)
      if total == 0:
        continue
      d = discounts[n]
      backoff = sum(d[min(count(g), 3)] for g in following)
      c = count(h + (token,)) if h + (token,) in raw else 0
      p = (c - d[min(c, 3)] + backoff * p) / total
    return p
  out = []
  for segment in scored:
    tokens = [bos, *segment]
    out += [math.log(probability(tokens[:i], tokens[i])) for i in range(1, len(tokens))]
  return out


@pytest.mark.parametrize("order", [2, 3, 5])
def test_agrees_with_a_written_out_kneser_ney(order):
  rng = np.random.default_rng(order)
  train = [list(rng.integers(0, 6, rng.integers(1, 12))) for _ in range(60)]
  scored = [list(rng.integers(0, 6, rng.integers(1, 12))) for _ in range(10)]
  model = ngram.fit([np.array(s) for s in train], order, vocab_size=6)
  assert model.logprobs([np.array(s) for s in scored]) == pytest.approx(
      _reference_logprobs(train, scored, order, 6), abs=1e-12)


@pytest.mark.parametrize("order", [1, 2, 3, 5])
def test_every_history_gives_a_distribution(order):
  rng = np.random.default_rng(order)
  segments = [rng.integers(0, 7, rng.integers(1, 20)) for _ in range(40)]
  model = ngram.fit(segments, order, vocab_size=7)
  for _ in range(5):
    history = list(rng.integers(0, 7, rng.integers(0, 4)))
    total = sum(math.exp(model.logprobs([np.array(history + [w])])[-1]) for w in range(7))
    assert total == pytest.approx(1.0)


@pytest.mark.slow
def test_eval_prints_the_reference_rows(trained_run, cache_dir, monkeypatch, capsys):
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  eval_command.main([f"--workdir={trained_run}", "--task=corpus_clm", "--batches=2", "--ngram=2"])
  out = capsys.readouterr().out
  unigram, bigram = (float(re.search(rf"{name} \(counts.*bits_per_byte ([0-9.]+)", out).group(1))
                     for name in ("unigram", "bigram"))
  assert bigram < unigram < 4, out
  assert "corpus_clm (validation, step 3, 2 batches):" in out
  assert "count-based references, scored on the split's causal-LM rows:" in out
  eval_command.main([f"--workdir={trained_run}", "--task=corpus_clm", "--batches=1"])
  assert "corpus_clm (validation, step 3, 1 batch):" in capsys.readouterr().out
  # Another task's rows than the references': said, as its loss is over other tokens.
  eval_command.main([f"--workdir={trained_run}", "--task=corpus_fim", "--batches=1", "--ngram=1"])
  assert "causal-LM rows, not corpus_fim's" in capsys.readouterr().out


def test_score_is_the_continuation_given_its_context():
  model = ngram.fit([np.array([A, B, C, A]), np.array([B, C])], 3, vocab_size=3)
  whole = model.logprobs([np.array([A, B, C]), np.array([C])])
  assert model.score([([A], [B, C]), ([], [C])]) == pytest.approx([whole[1] + whole[2], whole[3]])
