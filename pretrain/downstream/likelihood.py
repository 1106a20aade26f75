"""Scoring text by a model's own likelihood: log P(continuation | context) for many requests at once, the basis of
the zero-shot tasks (zero_shot.py).

Each request becomes the rows its objective reads (Objective.score_rows: one row for a decoder-only or
encoder-decoder model, a row per scored token for a masked LM's pseudo-log-likelihood); rows are sorted by length,
padded to a multiple of BUCKET tokens and run BATCH at a time, so a few compiled shapes serve every request.
"""

import collections

import jax
import numpy as np

BUCKET = 16
BATCH = 32


def padded(length: int) -> int:
  """`length` rounded up to a multiple of BUCKET."""
  return -(-length // BUCKET) * BUCKET


def _shape(row: dict[str, np.ndarray]) -> tuple:
  return tuple(sorted((name, padded(len(value))) for name, value in row.items()))


class Scorer:
  """log P(continuation | context) by a run's model: compiled once per shape, for any parameters of the model.

  `rows(context, continuation)` makes the rows a request is scored by: by default the objective's
  (Objective.score_rows, the form its examples have); lm-eval's harness gives its own (harness.py)."""

  def __init__(self, run, objective=None, rows=None, batch: int = BATCH):
    self.run, self.batch = run, batch
    objective = objective or run.objective
    self.rows = rows or (lambda context, continuation: objective.score_rows(context, continuation, run.vocabulary,
                                                                            run.task_lengths))
    family, model = run.family, run.model
    self._step = jax.jit(lambda params, batch: family.token_logprobs(model, params, batch))

  def __call__(self, params, requests: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
    """Per (context, continuation) of token ids: (the continuation's summed log-probability, whether every one of
    its tokens is the model's greedy choice)."""
    rows = [(i, row) for i, (context, continuation) in enumerate(requests)
            for row in self.rows(list(context), list(continuation))]
    by_shape = collections.defaultdict(list)
    for i, row in rows:
      by_shape[_shape(row)].append((i, row))
    logprob, greedy = np.zeros(len(requests)), np.ones(len(requests), bool)
    with self.run.activated():
      for shape, group in sorted(by_shape.items()):
        lengths = dict(shape)
        for start in range(0, len(group), self.batch):
          chunk = group[start:start + self.batch]
          batch = {name: np.zeros((self.batch, length), np.int32) for name, length in lengths.items()}
          for b, (_, row) in enumerate(chunk):
            for name, value in row.items():
              batch[name][b, :len(value)] = value
          logp_BL, greedy_BL = jax.device_get(self._step(params, batch))
          for b, (i, _) in enumerate(chunk):
            logprob[i] += float(logp_BL[b].sum(dtype=np.float64))
            greedy[i] &= bool(greedy_BL[b].all())
    return list(zip(logprob.tolist(), greedy.tolist()))
