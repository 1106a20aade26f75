"""Model FLOPs per token and the machine's measured matmul peak, for MFU.

flops/token = 6 * N + 12 * layers * heads * head_dim * seq_len (PaLM appendix B),
N counting every parameter that multiplies activations: all but the input
embedding table (the output projection counts, also when tied). The attention
term is the full (not causally halved) count.
"""

import time

import jax
import jax.numpy as jnp


def matmul_params(params, tie_embeddings: bool) -> int:
  total = sum(x.size for x in jax.tree.leaves(params))
  embed = params["embed"]["embedding"].size
  return total if tie_embeddings else total - embed


def flops_per_token(params, model_cfg, seq_len: int) -> float:
  n = matmul_params(params, model_cfg.tie_embeddings)
  return 6 * n + 12 * model_cfg.num_layers * model_cfg.num_heads * model_cfg.head_dim * seq_len


def matmul_peak(size: int = 2048, repeats: int = 10, dtype=jnp.float32) -> float:
  """FLOP/s of the best of several runs of a square matmul on the default device."""
  a = jnp.ones((size, size), dtype)
  matmul = jax.jit(lambda x: x @ x)
  matmul(a).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    matmul(a).block_until_ready()
    best = min(best, time.perf_counter() - start)
  return 2 * size**3 / best
