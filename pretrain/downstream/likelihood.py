"""Scoring text by a model's own likelihood: log P(continuation | context) for many requests at once, the basis of
the zero-shot tasks (zero_shot.py).

Each request becomes the rows its objective reads (Objective.score_rows: one row for a decoder-only or
encoder-decoder model, a row per scored token for a masked LM's pseudo-log-likelihood); rows are sorted by length
and run BATCH at a time, each batch padded to a multiple of BUCKET tokens, so a few compiled shapes serve every
request.
"""

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
    rows = sorted(((i, row) for i, (context, continuation) in enumerate(requests)
                   for row in self.rows(list(context), list(continuation))), key=lambda item: _shape(item[1]))
    logprob, greedy = np.zeros(len(requests)), np.ones(len(requests), bool)
    with self.run.activated():
      # Full batches of rows sorted by length, each padded to its longest row's bucket: as few batches as
      # requests allow, and no more compiled shapes than buckets.
      for start in range(0, len(rows), self.batch):
        chunk = rows[start:start + self.batch]
        lengths = {name: max(padded(len(row[name])) for _, row in chunk) for name in chunk[0][1]}
        batch = {name: np.zeros((self.batch, length), np.int32) for name, length in lengths.items()}
        for b, (_, row) in enumerate(chunk):
          for name, value in row.items():
            batch[name][b, :len(value)] = value
        logp_BL, greedy_BL = jax.device_get(self._step(params, batch))
        for b, (i, _) in enumerate(chunk):
          logprob[i] += float(logp_BL[b].sum(dtype=np.float64))
          greedy[i] &= bool(greedy_BL[b].all())
    return list(zip(logprob.tolist(), greedy.tolist()))
