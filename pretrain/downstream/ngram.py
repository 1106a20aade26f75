"""Count-based reference language models: what a trained model must beat to have learned more than word counts.

`fit` counts the n-grams of token segments; `NGram.logprobs` scores the tokens of other segments, each token given
the tokens before it in its segment (a segment starts from one BOS, as a row of the causal LM starts from its
decoder's BOS, and as SRILM's sentences start from <s>). Order 1 is the unigram with add-one smoothing; orders 2
and up are interpolated modified Kneser-Ney (Chen & Goodman 1999, section 3: three discounts D1, D2, D3+ per order
from its counts of counts, continuation counts below the top order except for n-grams that start at BOS, which
nothing precedes, the unigram level interpolated with the uniform distribution over the vocabulary, so no token
has probability 0): SRILM's `ngram-count -kndiscount -interpolate` without count cut-offs, the estimator of the
published Penn Treebank rows (docs/ptb.md).

Any order fits: an n-gram is named by a dense id, built from the id of its first n - 1 tokens and its last token
(so keys stay below tokens x vocabulary, whatever the order).

`reference` fits them on a run's train split and scores its validation split, both as the rows of the causal-LM
task over the run's source and vocabulary (the yardstick the experiments report): bits per byte on one scale
with every model's.
"""

import dataclasses
import itertools
import math

import numpy as np

_BOS = 0  # Tokens are shifted up by one in the keys: 0 is BOS, the history before a segment's first token.
_UNSEEN = -1


def _joined(segments: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
  """All segments in one array, each after a BOS, tokens shifted by one; and where the tokens (not BOS) are."""
  sequence = np.concatenate([np.concatenate([[_BOS], np.asarray(s, np.int64) + 1]) for s in segments]
                            if segments else [np.zeros(0, np.int64)])
  return sequence, sequence != _BOS


def _before(ids: np.ndarray) -> np.ndarray:
  """The id of the n-gram ending just before each position (the history of the (n+1)-gram ending there)."""
  return np.concatenate([[_UNSEEN], ids[:-1]])


def _keys(history: np.ndarray, sequence: np.ndarray, is_token: np.ndarray, base: int) -> np.ndarray:
  """The key of the n-gram ending at each position, from its history's id and its token (_UNSEEN where that
  history is unseen, or the position is a BOS: no n-gram of n > 1 ends there)."""
  return np.where(is_token & (history != _UNSEEN), history * base + sequence, _UNSEEN)


@dataclasses.dataclass
class _Level:
  """The n-grams of one order: their sorted keys and smoothing counts (raw at the top order and for n-grams that
  start at BOS, else continuation counts), and per history (the id of its (n-1)-gram; one empty history at order
  1) the counts' sum and the discounted mass's numerator D1 N1 + D2 N2 + D3+ N3+."""
  keys: np.ndarray
  counts: np.ndarray
  history_total: np.ndarray
  history_backoff: np.ndarray
  discounts: np.ndarray  # D(0) = 0, D(1), D(2), D(3+)

  def ids(self, keys: np.ndarray) -> np.ndarray:
    """The dense id of each key, _UNSEEN where the n-gram was not counted."""
    i = np.clip(np.searchsorted(self.keys, keys), 0, max(len(self.keys) - 1, 0))
    found = (keys != _UNSEEN) & (self.keys[i] == keys) if len(self.keys) else np.zeros(len(keys), bool)
    return np.where(found, i, _UNSEEN)


@dataclasses.dataclass
class NGram:
  order: int
  vocab_size: int
  levels: list  # order 1 first: _Level (Kneser-Ney) or, for a unigram model, its add-one counts
  base: int

  def logprobs(self, segments: list[np.ndarray]) -> np.ndarray:
    """The natural log-probability of every token of the segments, in order."""
    sequence, is_token = _joined(segments)
    if self.order == 1:
      counts, total = self.levels[0]
      return np.log((counts[sequence[is_token]] + 1.0) / (total + self.vocab_size))
    probability = np.full(int(is_token.sum()), 1.0 / self.vocab_size)
    ids = np.zeros(len(sequence), np.int64)  # Order 1's history: the empty one, for every position.
    for n, level in enumerate(self.levels, 1):
      history = ids if n == 1 else _before(ids)
      ids = level.ids(sequence if n == 1 else _keys(history, sequence, is_token, self.base))
      known, gram = history[is_token], ids[is_token]
      total = np.where(known == _UNSEEN, 0.0, level.history_total[np.maximum(known, 0)])
      count = np.where(gram == _UNSEEN, 0.0, level.counts[np.maximum(gram, 0)])
      discount = level.discounts[np.minimum(count, 3).astype(np.int64)]
      seen = total > 0
      interpolated = (count - discount + level.history_backoff[np.maximum(known, 0)] * probability) / np.where(
          seen, total, 1.0)
      probability = np.where(seen, interpolated, probability)  # An unseen history backs off entirely.
    return np.log(probability)

  def score(self, requests: list[tuple[list[int], list[int]]]) -> list[float]:
    """log P(continuation | context) of each request, the context read from BOS (zero_shot.accuracies)."""
    segments = [np.asarray([*context, *continuation], np.int64) for context, continuation in requests]
    logprobs, ends = self.logprobs(segments), np.cumsum([len(s) for s in segments])
    return [float(logprobs[end - len(continuation):end].sum()) for (_, continuation), end in zip(requests, ends)]


def _discounts(counts: np.ndarray) -> np.ndarray:
  """Modified Kneser-Ney's D1, D2, D3+ from the counts of counts n1..n4 (Chen & Goodman 1999, eq. 26), each kept in
  [0, its count]: a level with too few counts to estimate them falls back to the plain discount."""
  n = [np.sum(counts == k) for k in range(1, 5)]
  y = n[0] / (n[0] + 2 * n[1]) if n[0] + n[1] else 0.5
  estimates = [k - (k + 1) * y * n[k] / n[k - 1] if n[k - 1] else y for k in (1, 2, 3)]
  return np.array([0.0, *(min(max(d, 0.0), k) for k, d in zip((1, 2, 3), estimates))])


def fit(segments: list[np.ndarray], order: int, vocab_size: int) -> NGram:
  """An n-gram model of `order` counted on `segments` (arrays of token ids below vocab_size)."""
  if order < 1:
    raise ValueError(f"order must be at least 1, got {order}")
  base = vocab_size + 1
  sequence, is_token = _joined(segments)
  if order == 1:
    return NGram(1, vocab_size, [(np.bincount(sequence[is_token], minlength=base), int(is_token.sum()))], base)
  # The dense ids of the n-grams ending at every position, n = 1 .. order (order 1: the token; BOS included, a
  # history of the segment's first token).
  ids, uniques = [sequence], [np.arange(base)]
  for n in range(2, order + 1):
    keys = _keys(_before(ids[-1]), sequence, is_token, base)
    unique, inverse = np.unique(keys[keys != _UNSEEN], return_inverse=True)
    level_ids = np.full(len(sequence), _UNSEEN)
    level_ids[keys != _UNSEEN] = inverse
    ids.append(level_ids)
    uniques.append(unique)
  levels = []
  for n in range(1, order + 1):
    at = ids[n - 1] != _UNSEEN if n > 1 else is_token
    grams = len(uniques[n - 1])
    counts = np.bincount(ids[n - 1][at], minlength=grams).astype(np.float64)
    if n < order:  # Continuation counts: distinct tokens seen before the n-gram, BOS among them.
      longer = ids[n] != _UNSEEN
      pairs = np.unique(np.stack([ids[n - 1][longer], ids[n][longer]]), axis=1)
      following = np.bincount(pairs[0], minlength=grams)
      counts = np.where(following > 0, following, counts)  # An n-gram that starts at BOS keeps its raw count.
    counts[_BOS] = 0 if n == 1 else counts[_BOS]  # BOS is never predicted.
    discounts = _discounts(counts[counts > 0])
    histories = uniques[n - 1] // base if n > 1 else np.zeros(grams, np.int64)
    width = len(uniques[n - 2]) if n > 1 else 1
    total = np.bincount(histories, weights=counts, minlength=width)
    backoff = np.bincount(histories, weights=discounts[np.minimum(counts, 3).astype(np.int64)] * (counts > 0),
                          minlength=width)
    levels.append(_Level(uniques[n - 1], counts, total, backoff, discounts))
  return NGram(order, vocab_size, levels, base)


def segments(batches) -> list[np.ndarray]:
  """The segments of packed causal-LM batches (decoder_target_tokens split by decoder_segment_ids; padding and
  positions without loss left out)."""
  found = []
  for batch in batches:
    tokens, ids, weights = (np.asarray(batch[k]) for k in ("decoder_target_tokens", "decoder_segment_ids",
                                                           "decoder_loss_weights"))
    for row_tokens, row_ids, row_weights in zip(tokens, ids, weights):
      for segment in np.unique(row_ids[row_ids > 0]):
        found.append(row_tokens[(row_ids == segment) & (row_weights > 0)])
  return found


def bits_per_byte(model: NGram, evaluated: list[np.ndarray], bytes_per_id: np.ndarray) -> dict[str, float]:
  """{'loss': nats per token, 'bits_per_byte', 'tokens'} of a model on the tokens of `evaluated` segments."""
  logprobs = model.logprobs(evaluated)
  tokens = np.concatenate(evaluated) if evaluated else np.zeros(0, np.int64)
  return {"loss": float(-logprobs.mean()),
          "bits_per_byte": float(-logprobs.sum() / math.log(2) / bytes_per_id[tokens].sum()), "tokens": len(tokens)}


ORDERS = {1: "unigram (counts, add-one)", 2: "bigram (counts, interpolated Kneser-Ney)",
          3: "trigram (counts, interpolated Kneser-Ney)", 4: "4-gram (counts, interpolated Kneser-Ney)",
          5: "5-gram (counts, interpolated Kneser-Ney)"}


def clm_segments(run, split: str, max_batches: int | None = None) -> list[np.ndarray]:
  """The segments of a run's causal-LM rows (its first source and vocabulary, rows of data.seq_len) in `split`."""
  from pretrain import objectives  # pylint: disable=g-import-not-at-top  (only for a run's rows)
  from pretrain.data import sources, tasks  # pylint: disable=g-import-not-at-top  (the data stack)
  clm = objectives.make("clm", run.cfg.data, run.cfg.train.seed)
  source = run.source or sources.mixture_sources(run.cfg.data)[0][0]
  task = tasks.register_mixture([(source, 1.0)], run.vocabulary, clm)
  return segments(itertools.islice(run.batches(split, task, clm, shuffle=False, repeat=False, whole=True),
                                   max_batches))


def fitted(run, orders=(1, 2, 3), train: list[np.ndarray] | None = None) -> dict[int, NGram]:
  """Count models of each order fitted on the train split of a run's causal-LM rows (`train`: those rows'
  segments, where read already)."""
  train = clm_segments(run, "train") if train is None else train
  return {order: fit(train, order, run.vocab_size) for order in orders}


def reference(run, orders=(1, 2, 3), max_batches: int | None = None, split: str = "validation",
              models: dict[int, NGram] | None = None) -> dict[int, dict[str, float]]:
  """{order: {'loss', 'bits_per_byte'}} of count models (`models`, or fitted on the run's train split) scored on
  up to `max_batches` batches (None: all) of `split`'s causal-LM rows: the rows `pretrain eval
  --task=SOURCE_clm` and the experiments' yardstick read."""
  from pretrain import vocab as text_vocab  # pylint: disable=g-import-not-at-top  (only for a run's rows)
  models = models or fitted(run, orders)
  scored, per_id = clm_segments(run, split, max_batches), text_vocab.bytes_per_id(run.vocabulary)
  return {order: bits_per_byte(models[order], scored, per_id) for order in orders}
