"""Count-based reference language models: what a trained model must beat to have learned more than word counts.

`fit` counts the n-grams of token segments; `NGram.logprobs` scores the tokens of other segments, each token given
the tokens before it in its segment (a segment starts from BOS, as a row of the causal LM starts from its
decoder's BOS). Order 1 is the unigram with add-one smoothing; orders 2 and up are interpolated Kneser-Ney (Chen &
Goodman 1999: absolute discount D = n1 / (n1 + 2 n2) per order, continuation counts below the top order, the
unigram level interpolated with the uniform distribution over the vocabulary, so no token has probability 0).

`reference` fits them on a run's train split and scores its validation split, both as the rows of the causal-LM
task over the run's source and vocabulary (the yardstick the experiments report): bits per byte on one scale
with every model's.
"""

import dataclasses
import itertools
import math

import numpy as np

BOS = -1  # The history before a segment's first token: no token id.


def _keys(columns: list[np.ndarray], base: int) -> np.ndarray:
  """One int64 key per row of ids (BOS included, as 0 with every id shifted by one)."""
  key = np.zeros(len(columns[0]), np.int64)
  for column in columns:
    key = key * base + (column.astype(np.int64) + 1)
  return key


def _grams(segments: list[np.ndarray], order: int) -> list[np.ndarray]:
  """`order` columns: for each token of each segment, the order - 1 tokens before it (BOS-padded) and itself."""
  columns = [[] for _ in range(order)]
  for tokens in segments:
    padded = np.concatenate([np.full(order - 1, BOS, np.int64), np.asarray(tokens, np.int64)])
    for k in range(order):
      columns[k].append(padded[k:k + len(tokens)])
  return [np.concatenate(c) if c else np.zeros(0, np.int64) for c in columns]


class _Counts:
  """Counts of sorted distinct keys, looked up in bulk."""

  def __init__(self, keys: np.ndarray, counts: np.ndarray):
    self.keys, self.counts = keys, counts

  def __getitem__(self, keys: np.ndarray) -> np.ndarray:
    i = np.clip(np.searchsorted(self.keys, keys), 0, max(len(self.keys) - 1, 0))
    found = (self.keys[i] == keys) if len(self.keys) else np.zeros(len(keys), bool)
    return np.where(found, self.counts[i] if len(self.keys) else 0, 0)


@dataclasses.dataclass
class _Level:
  """One order of the Kneser-Ney model: counts of (history, token) and, per history, their sum and how many
  distinct tokens follow it."""
  joint: _Counts
  history_total: _Counts
  history_types: _Counts
  discount: float


@dataclasses.dataclass
class NGram:
  order: int
  vocab_size: int
  levels: list  # order 1 first: _Level (Kneser-Ney) or, for a unigram model, its add-one counts
  base: int

  def logprobs(self, segments: list[np.ndarray]) -> np.ndarray:
    """The natural log-probability of every token of the segments, in order."""
    columns = _grams(segments, self.order)
    if self.order == 1:
      counts, total = self.levels[0]
      return np.log((counts[_keys(columns[-1:], self.base)] + 1.0) / (total + self.vocab_size))
    probability = np.full(len(columns[-1]), 1.0 / self.vocab_size)
    for n, level in enumerate(self.levels, 1):
      context = columns[self.order - n:-1]
      joint = level.joint[_keys(context + columns[-1:], self.base)].astype(np.float64)
      if n == 1:
        total, types = level.history_total.counts.sum(), len(level.joint.keys)
        probability = (np.maximum(joint - level.discount, 0) + level.discount * types * probability) / total
        continue
      history = _keys(context, self.base)
      total = level.history_total[history].astype(np.float64)
      types = level.history_types[history]
      seen = total > 0
      safe = np.where(seen, total, 1.0)
      interpolated = (np.maximum(joint - level.discount, 0) + level.discount * types * probability) / safe
      probability = np.where(seen, interpolated, probability)  # An unseen history backs off entirely.
    return np.log(probability)


  def score(self, requests: list[tuple[list[int], list[int]]]) -> list[float]:
    """log P(continuation | context) of each request, the context read from BOS (zero_shot.accuracies)."""
    segments = [np.asarray([*context, *continuation], np.int64) for context, continuation in requests]
    logprobs, ends = self.logprobs(segments), np.cumsum([len(s) for s in segments])
    return [float(logprobs[end - len(continuation):end].sum()) for (_, continuation), end in zip(requests, ends)]


def _discount(counts: np.ndarray) -> float:
  n1, n2 = np.sum(counts == 1), np.sum(counts == 2)
  return float(n1 / (n1 + 2 * n2)) if n1 + n2 else 0.5


def fit(segments: list[np.ndarray], order: int, vocab_size: int) -> NGram:
  """An n-gram model of `order` counted on `segments` (arrays of token ids below vocab_size)."""
  if order < 1:
    raise ValueError(f"order must be at least 1, got {order}")
  base = vocab_size + 1
  if order * math.log2(base) >= 62:
    raise ValueError(f"a {vocab_size}-id vocabulary's {order}-grams do not fit 64-bit keys; lower the order")
  columns = _grams(segments, order)
  if order == 1:
    return NGram(1, vocab_size, [(_Counts(*np.unique(_keys(columns, base), return_counts=True)), len(columns[0]))],
                 base)
  levels = []
  for n in range(1, order + 1):
    grams = columns[order - n:]
    if n == order:  # The top order counts occurrences.
      keys, counts = np.unique(_keys(grams, base), return_counts=True)
    else:  # Lower orders count the distinct tokens before the n-gram (Kneser-Ney's continuation counts).
      keys, counts = np.unique(np.unique(_keys(columns[order - n - 1:], base)) % base ** n, return_counts=True)
    histories, inverse = np.unique(keys // base, return_inverse=True)
    levels.append(_Level(_Counts(keys, counts), _Counts(histories, np.bincount(inverse, weights=counts)),
                         _Counts(histories, np.bincount(inverse)), _discount(counts)))
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
  """{'loss': nats per token, 'bits_per_byte'} of a model on the tokens of `evaluated` segments."""
  logprobs = model.logprobs(evaluated)
  tokens = np.concatenate(evaluated) if evaluated else np.zeros(0, np.int64)
  return {"loss": float(-logprobs.mean()),
          "bits_per_byte": float(-logprobs.sum() / math.log(2) / bytes_per_id[tokens].sum())}


ORDERS = {1: "unigram (counts, add-one)", 2: "bigram (counts, interpolated Kneser-Ney)",
          3: "trigram (counts, interpolated Kneser-Ney)"}


def _clm_segments(run, split: str, max_batches: int | None) -> list[np.ndarray]:
  """The segments of a run's causal-LM rows (its first source and vocabulary, rows of data.seq_len) in `split`."""
  from pretrain import objectives  # pylint: disable=g-import-not-at-top
  from pretrain.data import sources, tasks  # pylint: disable=g-import-not-at-top  (the data stack)
  clm = objectives.make("clm", run.cfg.data, run.cfg.train.seed)
  source = run.source or sources.mixture_sources(run.cfg.data)[0][0]
  task = tasks.register_mixture([(source, 1.0)], run.vocabulary, clm)
  return segments(itertools.islice(run.batches(split, task, clm, shuffle=False, repeat=False), max_batches))


def fitted(run, orders=(1, 2, 3)) -> dict[int, NGram]:
  """Count models of each order fitted on the train split of a run's causal-LM rows."""
  train = _clm_segments(run, "train", None)
  return {order: fit(train, order, run.vocab_size) for order in orders}


def reference(run, orders=(1, 2, 3), max_batches: int | None = None, split: str = "validation",
              models: dict[int, NGram] | None = None) -> dict[int, dict[str, float]]:
  """{order: {'loss', 'bits_per_byte'}} of count models (`models`, or fitted on the run's train split) scored on
  up to `max_batches` batches (None: all) of `split`'s causal-LM rows: the rows `pretrain eval
  --task=SOURCE_clm` and the experiments' yardstick read."""
  from pretrain import vocab as text_vocab  # pylint: disable=g-import-not-at-top
  models = models or fitted(run, orders)
  scored, per_id = _clm_segments(run, split, max_batches), text_vocab.bytes_per_id(run.vocabulary)
  return {order: bits_per_byte(models[order], scored, per_id) for order in orders}
