"""Scoring text by a model's own likelihood: log P(continuation | context) for many requests at once, the basis of
the zero-shot tasks (zero_shot.py) and of lm-eval's loglikelihood (harness.py).

Each request becomes the rows its objective reads (Objective.score_rows: one row for a decoder-only or
encoder-decoder model, a row per scored token for a masked LM's pseudo-log-likelihood). A language model (a family
that generates) reads its decoder causally, so requests share forward passes: a row whose decoder inputs are a
prefix of another row's, with the same encoder inputs and the same bidirectional prefix (a prefix-LM's), is read
from that longer row, each request's tokens gathered from the logits at its own positions. The choices of a
multiple-choice context one token long, continuations that are prefixes of a longer one and repeated requests
cost one row (lm-eval's hf backend shares only rows of equal inputs: its one-token cache). A mixture of experts
that drops tokens past capacity sees the whole row, so only equal rows share there; other families (a masked LM,
ELECTRA's discriminator) run each row alone. Rows are sorted by length and run BATCH at a time, each batch padded
to a multiple of BUCKET tokens, so a few compiled shapes serve every request.
"""

import collections

import jax
import jax.numpy as jnp
import numpy as np

from pretrain.system.errors import UserError

BUCKET = 16
BATCH = 32
# The scored tokens and where they count, in a generating family's rows (seqio's decoder features).
TARGETS, WEIGHTS = "decoder_target_tokens", "decoder_loss_weights"


def padded(length: int) -> int:
  """`length` rounded up to a multiple of BUCKET."""
  return -(-length // BUCKET) * BUCKET


def _shape(row: dict[str, np.ndarray]) -> tuple:
  return tuple(sorted((name, padded(len(value))) for name, value in row.items()))


class _Host:
  """A row the model runs and the requests that read it: (request, positions, slots), where slot 0 of a position
  is the row's own target token and slots 1, 2, ... the other tokens requests score there (`extra`)."""

  def __init__(self, row: dict[str, np.ndarray], targets: np.ndarray):
    self.row, self.targets, self.readers = row, targets, []
    self.extra = collections.defaultdict(list)

  def read(self, request: int, positions: np.ndarray, tokens: np.ndarray) -> None:
    slots = np.zeros(len(positions), np.int64)
    for j in np.flatnonzero(tokens != self.targets[positions]):  # Mostly a continuation's last token only.
      extra, token = self.extra[int(positions[j])], int(tokens[j])
      if token not in extra:
        extra.append(token)
      slots[j] = 1 + extra.index(token)
    self.readers.append((request, positions, slots))

  @property
  def width(self) -> int:
    """Tokens scored at one position, at most."""
    return 1 + max(map(len, self.extra.values()), default=0)


def _sharing_key(row: dict[str, np.ndarray]) -> tuple[tuple, bytes]:
  """(what must be equal for two rows to share a forward pass, the decoder's inputs position by position): a row
  is read from another whose decoder bytes start with its own."""
  inputs = {name: value for name, value in row.items() if name not in (TARGETS, WEIGHTS)}
  causal = sorted(name for name in inputs if name.startswith("decoder_"))
  # The encoder is read whole, and a prefix-LM's prefix is seen by every position: both equal.
  exact = tuple((name, np.asarray(inputs[name], np.int32).tobytes()) for name in sorted(inputs) if name not in causal)
  prefix = int(np.sum(inputs["decoder_causal_attention"])) if "decoder_causal_attention" in inputs else 0
  stacked = np.stack([np.asarray(inputs[name], np.int32) for name in causal], axis=1)
  return (tuple(causal), exact, prefix), stacked.tobytes()


def _shared(rows: list[tuple[int, dict]], prefixes: bool) -> list[_Host]:
  """Hosts for (request, row)s: rows whose causal inputs are a prefix of another's (`prefixes`; else equal) are
  read from the longest. Within a group sorted by those inputs, a row that is a prefix of any other is a prefix of
  the next, so one pass from the end finds each row's longest."""
  groups = collections.defaultdict(list)
  for index, (_, row) in enumerate(rows):
    group, inputs = _sharing_key(row)
    groups[group].append((inputs, index))
  hosts = []
  for members in groups.values():
    host_inputs, host = None, None
    for inputs, index in sorted(members, reverse=True):
      request, row = rows[index]
      if host is None or not (host_inputs.startswith(inputs) if prefixes else host_inputs == inputs):
        host_inputs = inputs
        host = _Host({k: v for k, v in row.items() if k not in (TARGETS, WEIGHTS)}, np.asarray(row[TARGETS]))
        hosts.append(host)
      positions = np.flatnonzero(row[WEIGHTS])
      host.read(request, positions, np.asarray(row[TARGETS])[positions])
  return hosts


def _alone(rows: list[tuple[int, dict]], family) -> list[_Host]:
  """A host per row, its family's own scores of its own targets."""
  hosts = []
  for request, row in rows:
    targets, weights = family.targets_and_weights(row)
    hosts.append(_Host(row, np.asarray(targets)))
    positions = np.flatnonzero(weights)
    hosts[-1].read(request, positions, hosts[-1].targets[positions])
  return hosts


def _scored_tokens(chunk: list[_Host], size: int, length: int) -> np.ndarray:
  """[B, L, K] the tokens a batch's rows score at each decoder position (K: a power of two, few shapes)."""
  width = 1 << (max(host.width for host in chunk) - 1).bit_length()
  tokens_BLK = np.zeros((size, length, width), np.int32)
  for b, host in enumerate(chunk):
    tokens_BLK[b, :len(host.targets), 0] = host.targets
    for position, tokens in host.extra.items():
      tokens_BLK[b, position, 1:1 + len(tokens)] = tokens
  return tokens_BLK


def _gathered_logprobs(family, model, params, batch, tokens_BLK):
  """(log-probability of each token [B, L, K] at its position, whether it is the model's greedy choice)."""
  logits_BLV = family.token_logits(model, params, batch).astype(jnp.float32)
  logp_BLK = jnp.take_along_axis(jax.nn.log_softmax(logits_BLV), tokens_BLK, axis=-1)
  return logp_BLK, jnp.argmax(logits_BLV, -1)[..., None] == tokens_BLK


class TooLong(UserError):
  """Requests longer than the positions the model trained at (Family.position_limits): scores there are not the
  model's, so none is given."""


def check_lengths(rows: list[tuple[int, dict]], limits: dict[str, int | None], requests: int) -> None:
  """TooLong where a (request, row) gives a side of the model more tokens than `limits` allow."""
  for side, limit in limits.items():
    if limit is None:
      continue
    lengths = {i: len(row[f"{side}_input_tokens"]) for i, row in rows if f"{side}_input_tokens" in row}
    over = {i for i, length in lengths.items() if length > limit}
    if over:
      raise TooLong(f"{len(over)} of {requests} requests give the model's {side} up to {max(lengths.values())} "
                    f"tokens, more than the {limit} positions it trained at, where its scores are not the model's",
                    fix="score shorter texts, or a run trained on longer rows")


class Scorer:
  """log P(continuation | context) by a run's model: compiled once per shape, for any parameters of the model.

  `rows(context, continuation)` makes the rows a request is scored by: by default the objective's
  (Objective.score_rows, the form its examples have); lm-eval's harness gives its own (harness.py). `rows_run`:
  the rows the model ran in the last call."""

  def __init__(self, run, objective=None, rows=None, batch: int = BATCH):
    self.run, self.batch, self.rows_run = run, batch, 0
    objective = objective or run.objective
    self.rows = rows or (lambda context, continuation: objective.score_rows(context, continuation, run.vocabulary,
                                                                            run.task_lengths))
    family, model = run.family, run.model
    self.limits = family.position_limits(run.cfg.model, run.task_lengths)
    # A language model's logits cover the vocabulary: any token of a position is read from its row. Other
    # families score their rows' own targets (ELECTRA's discriminator has no vocabulary).
    self._shares = family.generates
    model_cfg = run.cfg.model
    self._prefixes = not (model_cfg.get("moe_experts") and model_cfg.get("moe_capacity_factor"))
    if self._shares:
      self._step = jax.jit(lambda params, batch, tokens_BLK: _gathered_logprobs(family, model, params, batch,
                                                                                tokens_BLK))
    else:
      self._step = jax.jit(lambda params, batch, _: tuple(x[..., None] for x in family.token_logprobs(model, params,
                                                                                                      batch)))

  def __call__(self, params, requests: list[tuple[list[int], ...]]) -> list[tuple[float, bool]]:
    """Per (context, continuation) of token ids (or whatever parts `rows` takes, e.g. a masked span's prefix, span
    and suffix): (the scored tokens' summed log-probability, whether every one of them is the model's greedy
    choice)."""
    rows = [(i, row) for i, request in enumerate(requests) for row in self.rows(*map(list, request))]
    check_lengths(rows, self.limits, len(requests))
    hosts = _shared(rows, self._prefixes) if self._shares else _alone(rows, self.run.family)
    hosts.sort(key=lambda host: _shape(host.row))
    self.rows_run = len(hosts)
    logprob, greedy = np.zeros(len(requests)), np.ones(len(requests), bool)
    with self.run.activated():
      # Full batches of rows sorted by length, each padded to its longest row's bucket, the last batch to a power
      # of two rows: as few batches as requests allow, little padding, and few compiled shapes (buckets, times
      # the tokens a position scores, in powers of two).
      for start in range(0, len(hosts), self.batch):
        chunk = hosts[start:start + self.batch]
        size = min(self.batch, 1 << (len(chunk) - 1).bit_length())
        lengths = {name: max(padded(len(host.row[name])) for host in chunk) for name in chunk[0].row}
        batch = {name: np.zeros((size, length), np.int32) for name, length in lengths.items()}
        for b, host in enumerate(chunk):
          for name, value in host.row.items():
            batch[name][b, :len(value)] = value
        tokens_BLK = _scored_tokens(chunk, size, lengths["decoder_input_tokens"]) if self._shares else None
        logp_BLK, greedy_BLK = jax.device_get(self._step(params, batch, tokens_BLK))
        for b, host in enumerate(chunk):
          for i, positions, slots in host.readers:
            logprob[i] += float(logp_BLK[b, positions, slots].sum(dtype=np.float64))
            greedy[i] &= bool(greedy_BLK[b, positions, slots].all())
    return list(zip(logprob.tolist(), greedy.tolist()))
