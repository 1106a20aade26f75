"""Model FLOPs of a training step and the machine's measured matmul peak, for MFU.

For a decoder-only model, flops/token = 6 * N + 12 * layers * heads * head_dim
* seq_len (PaLM appendix B), N counting every parameter that multiplies
activations: all but the input embedding table (the output projection counts,
also when tied). An encoder-decoder model counts each parameter against the
tokens it sees (inputs or targets), and its three kinds of attention. A
mixture-of-experts layer counts its active parameters: top_k of its experts.
"""

import time

import jax
import jax.numpy as jnp

from pretrain import models


def _tokens_through(path: str, lengths: dict[str, int]) -> int:
  """How many tokens of an example a parameter multiplies: encoder parameters
  (and the decoder's cross-attention keys and values) see the inputs, the rest
  the targets, or the whole row of a decoder-only model."""
  if "inputs" not in lengths or "encoder" in path or ("cross_attention" in path and ("'key'" in path or "'value'" in path)):
    return sum(lengths.values()) if "inputs" not in lengths else lengths["inputs"]
  return lengths["targets"]


def _active_share(path: str, model_cfg) -> float:
  """The share of a parameter that a token multiplies: top_k / experts for the experts of a mixture-of-experts
  layer (their kernels ['moe']['wi_0'], ...; not its router or shared expert), 1 for the rest."""
  if "['moe']['w" in path:
    return model_cfg.moe_top_k / model_cfg.moe_experts
  return 1.0


def active_parameters(params, model_cfg) -> float:
  """The parameters a token multiplies or gathers: all, but only top_k of each mixture-of-experts layer's experts."""
  return sum(leaf.size * _active_share(jax.tree_util.keystr(path), model_cfg)
             for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0])


def _multiplying(params, model_cfg):
  """(name, leaf) of the parameters a token multiplies: all but the input embedding, which gathers (unless it is
  tied to the output)."""
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    name = jax.tree_util.keystr(path)
    if "'embed'" not in name or model_cfg.tie_embeddings:
      yield name, leaf


def multiplying_parameters(params, model_cfg) -> float:
  """N of C = 6 N D as flops_per_example counts it: the parameters a token multiplies (not the input embedding;
  top_k of a mixture-of-experts layer's experts)."""
  return sum(leaf.size * _active_share(name, model_cfg) for name, leaf in _multiplying(params, model_cfg))


def flops_per_example(params, model_cfg, lengths: dict[str, int]) -> float:
  """Training FLOPs of one example: 6 per parameter per token it multiplies (the
  input embedding gathers, it does not multiply, unless tied to the output)
  plus 12 * heads * head_dim per query-key pair of every attention layer
  (full, not causally halved)."""
  total = 0
  for name, leaf in _multiplying(params, model_cfg):
    total += 6 * leaf.size * _active_share(name, model_cfg) * _tokens_through(name, lengths)
  width = 12 * model_cfg.num_heads * model_cfg.head_dim
  if "inputs" not in lengths:
    return total + width * model_cfg.num_layers * sum(lengths.values()) ** 2
  s, t = lengths["inputs"], lengths["targets"]
  decoder_layers = model_cfg.num_decoder_layers or model_cfg.num_layers
  return total + width * (model_cfg.num_layers * s * s + decoder_layers * (t * t + t * s))


def peak_size() -> int:
  """The side of the square matmul that measures the peak: 2048 on CPUs; 8192 on accelerators, where a 2048
  product leaves much of the chip idle."""
  return 2048 if jax.default_backend() == "cpu" else 8192


def peak_dtype(model_cfg) -> jnp.dtype:
  """The dtype of the matmul whose peak MFU divides by: the model's activations'."""
  return jnp.dtype(models.activation_dtype(model_cfg.dtype))


def matmul_peak(size: int | None = None, repeats: int = 10, dtype=jnp.float32) -> float:
  """FLOP/s of the best of several runs of a square matmul (of peak_size() by default) on the default device,
  on random values (zeros run faster than real data on some chips)."""
  size = size or peak_size()
  a = jax.random.normal(jax.random.key(0), (size, size), dtype)
  matmul = jax.jit(lambda x: x @ x)
  matmul(a).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    matmul(a).block_until_ready()
    best = min(best, time.perf_counter() - start)
  return 2 * size**3 / best


# The best peak a Peak of this process has reached, by its key: the runs after the first in one process (a
# sweep's, an experiment's) start from it rather than measure again (seconds a run on a CPU).
_BEST: dict = {}


class Peak:
  """The FLOP/s that MFU divides by: the best of the matmul peaks measured so far (in this process, for `key`),
  measured again whenever the steps themselves ran faster than it (a machine busy while the first was measured),
  and never below the steps' own rate, so MFU cannot exceed 1."""

  def __init__(self, measure, key=None):
    self._measure, self._key = measure, key
    self.value = _BEST[key] if key in _BEST else measure()
    self.remeasured = 0
    self._remember()

  def mfu(self, achieved: float) -> float:
    """Model FLOPs utilisation of `achieved` model FLOP/s."""
    if achieved > self.value:
      self.value = max(self.value, self._measure(), achieved)
      self.remeasured += 1
      self._remember()
    return achieved / self.value

  def _remember(self) -> None:
    if self._key is not None:
      _BEST[self._key] = max(_BEST.get(self._key, 0.0), self.value)

