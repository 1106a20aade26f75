"""Transformer building blocks shared by the model families.

Shapes are named in suffixes, one letter an axis; a letter means the same
thing in every file of pretrain/models/:

  B batch
  L query length
  S key length (the whole cache when decoding); in the encoder-decoder, the
    encoder's input length, which cross-attention reads as keys
  T the encoder-decoder's decoder length
  C the key length of the encoder-decoder's decoder self-attention: T, or the
    whole cache when decoding
  P prompt length, G generated tokens (max_new_tokens), in decoding.py
  D model width
  N query heads
  K key/value heads
  H head width
  A rotary angles: H / 2, one per rotated pair of channels
  R T5's relative-position buckets
  F feed-forward width
  V vocabulary
  1 an axis of length 1, broadcast

Parameters are created in float32 and stored in model.param_dtype by the
train state (train/state.py); each layer computes in its `dtype` (RMSNorm in
float32).
"""

import dataclasses
import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from pretrain.models import attention
from pretrain.parallel import mesh as mesh_lib
from pretrain.system.errors import UserError

Dtype = jnp.dtype
partitioned = nn.with_logical_partitioning


def config_fields(config_class, model_cfg) -> dict:
  """The dataclass fields found in the model config section (others keep their defaults)."""
  names = {f.name for f in dataclasses.fields(config_class)} - {"vocab_size"}
  return {k: model_cfg[k] for k in names if k in model_cfg}


def kernel_init(*axes, in_axis=-2, out_axis=-1, batch_axis=()):
  """Fan-in scaled truncated normal, with the kernel's logical axis names; `batch_axis`: axes of kernels side by
  side (the experts of an MoE layer), each initialised as its own."""
  init = nn.initializers.variance_scaling(1.0, "fan_in", "truncated_normal", in_axis=in_axis, out_axis=out_axis,
                                          batch_axis=batch_axis)
  return partitioned(init, axes)


def project(x, kernel, contract: int = 1, precision=None, preferred_element_type=None):
  """x's last `contract` axes times `kernel`'s first `contract` axes, as one [rows, inputs] x [inputs, outputs]
  matmul (x [B, L, D] times [D, N, H] gives [B, L, N, H]; [B, L, N, H] times [N, H, D] gives [B, L, D]).

  The same product as the einsum, but the kernel's gradient is then a matmul over one axis of rows. Over
  B and L as two axes, XLA:CPU computed it by first copying the activations transposed, in a strided loop:
  an eighth of the Llama benchmark step's op time (tools/bench_train.md). On accelerators the reshapes are free.
  """
  inner, outer = x.shape[-contract:], kernel.shape[contract:]
  y = jax.lax.dot(x.reshape(-1, math.prod(inner)), kernel.reshape(math.prod(inner), math.prod(outer)),
                  precision=precision, preferred_element_type=preferred_element_type)
  return y.reshape(*x.shape[:-contract], *outer)


def dense_dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
  """nn.Dense's product (lhs's last axis with the kernel's first) as `project`: pass it as `dot_general=`."""
  assert dimension_numbers == (((lhs.ndim - 1,), (0,)), ((), ())), dimension_numbers
  return project(lhs, rhs, 1, precision, preferred_element_type)


# The models' projections of [B, L, D] activations: no bias, float32 parameters, computed as `project`.
Dense = functools.partial(nn.Dense, use_bias=False, param_dtype=jnp.float32, dot_general=dense_dot_general)


def tied_logits(embed: nn.Embed, x_BLD):
  """nn.Embed.attend (x times the embedding matrix's transpose) as `project`."""
  x_BLD, embedding_VD = embed.promote_dtype(x_BLD, embed.embedding, dtype=embed.dtype)
  return project(x_BLD, embedding_VD.T)


REMAT_POLICIES = {
    "full": jax.checkpoint_policies.nothing_saveable,
    "save_dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def rematerialised(module_class, policy: str, scanned: bool):
  """`module_class` recomputed in the backward pass under a named policy ('none' keeps it as is)."""
  if policy == "none":
    return module_class
  if policy not in REMAT_POLICIES:
    raise UserError(f"model.remat={policy!r} is unknown; use none, {', '.join(REMAT_POLICIES)}")
  return nn.remat(module_class, policy=REMAT_POLICIES[policy], prevent_cse=not scanned)


def repeat(block_class, count: int, scan: bool, remat: str, module_args: tuple, x, *shared, moe_every: int = 0):
  """`count` blocks applied in turn to `x` (each also given `shared`), unrolled
  as submodules `layer_{i}` or under one nn.scan named `layers` whose parameters
  (and decoding caches) gain a leading 'layers' axis. Called from a compact method.

  With `moe_every` n > 0, blocks n, 2n, ... (counting from 1, as Switch and Qwen-MoE place them) are built with
  sparse=True: their feed-forward is a mixture of experts. Scanned, the scan's unit is then n blocks
  (`layers/block_{j}`), of which the last is sparse.

  A block returns (x, None) when scanned: nn.scan wants (carry, output).
  """
  if not scan:
    block = rematerialised(block_class, remat, scanned=False)
    for i in range(count):
      sparse = {"sparse": (i + 1) % moe_every == 0} if moe_every else {}
      x = block(*module_args, **sparse, name=f"layer_{i}")(x, *shared)
    return x
  block, module_args, unit = scan_unit(block_class, remat, module_args, moe_every)
  return scanned(block, count // unit, len(shared))(*module_args, name="layers")(x, *shared)[0]


def scan_unit(block_class, remat: str, module_args: tuple, moe_every: int = 0):
  """What nn.scan repeats over a stack of layers (repeat's scan; a pipeline's chunks): (its module, its module
  arguments, the layers it holds): one block, or under moe_every n > 1 a BlockUnit of n blocks, the last sparse."""
  block = rematerialised(block_class, remat, scanned=True)
  if moe_every > 1:
    return BlockUnit, (block, module_args, moe_every), moe_every
  return block, (*module_args, *((True,) if moe_every == 1 else ())), 1


def scanned(block, length: int, shared: int):
  """nn.scan of `block` over `length` layers, their parameters (and caches) stacked on a leading 'layers' axis;
  the block takes the carry and `shared` arguments the same for every layer."""
  return nn.scan(block, variable_axes={"params": 0, "cache": 0, "moe": 0}, split_rngs={"params": True, "dropout": True},
                 in_axes=(nn.broadcast,) * shared, length=length, metadata_params={nn.PARTITION_NAME: "layers"})


class BlockUnit(nn.Module):
  """`size` blocks in turn, the last one sparse: the unit that nn.scan repeats when every n-th block is."""
  block: type
  module_args: tuple
  size: int

  @nn.compact
  def __call__(self, x, *shared):
    for j in range(self.size):
      x = self.block(*self.module_args, sparse=j == self.size - 1, name=f"block_{j}")(x, *shared)[0]
    return x, None


def dropout(rate: float, deterministic: bool):
  """Dropout for the residual branches; the identity when deterministic or at rate 0."""
  return nn.Dropout(rate, deterministic=deterministic or rate == 0.0)


def pre_norm_residual(x_BLD, name: str, branch, dtype, drop, eps: float = 1e-6):
  """x + drop(branch(RMSNorm(x))): one residual branch of a pre-norm block; the norm is named `{name}_norm`."""
  return x_BLD + drop(branch(RMSNorm(eps, dtype=dtype, name=f"{name}_norm")(x_BLD)))


def block_output(x_BLD, scan_layers: bool):
  """A block's output, constrained to its logical layout; under nn.scan, as (carry, no per-layer output)."""
  x_BLD = mesh_lib.constrain(x_BLD, ("activation_batch", "activation_length", "activation_embed"))
  return (x_BLD, None) if scan_layers else x_BLD


class RMSNorm(nn.Module):
  """Root-mean-square layer norm, no bias, computed in float32."""
  eps: float = 1e-6
  dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x_BLD):
    scale_D = self.param("scale", partitioned(nn.initializers.ones, ("embed",)), (x_BLD.shape[-1],), jnp.float32)
    x = x_BLD.astype(jnp.float32)
    x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + self.eps)
    return (x * scale_D).astype(self.dtype)


def apply_rotary(x_BLNH, positions_BL, theta: float):
  """Rotary position embedding, in the half-split layout of Llama."""
  half = x_BLNH.shape[-1] // 2
  inv_freq_A = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)
  angles_BLA = positions_BL[..., None].astype(jnp.float32) * inv_freq_A
  sin, cos = jnp.sin(angles_BLA)[:, :, None, :], jnp.cos(angles_BLA)[:, :, None, :]
  x = x_BLNH.astype(jnp.float32)
  x1, x2 = x[..., :half], x[..., half:]
  return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x_BLNH.dtype)


class Attention(nn.Module):
  """Multi-head attention with grouped key/value heads and rotary positions."""
  num_heads: int
  num_kv_heads: int
  head_dim: int
  rope_theta: float = 10000.0
  dtype: Dtype = jnp.float32
  query_scale: float = 1.0  # muP's (models/mup.py)

  def _kernel(self, name, shape, axes, in_axis, out_axis):
    init = kernel_init(*axes, in_axis=in_axis, out_axis=out_axis)
    return self.param(name, init, shape, jnp.float32).astype(self.dtype)

  @nn.compact
  def __call__(self, x_BLD, mask: attention.Mask, positions_BL, decode: bool = False):
    """With `decode`, keys and values are appended to a cache in the 'cache'
    collection (created by `init` with decode=True at the full length S) and
    the queries attend over the whole cache under an explicit `mask` [B, 1, L, S]."""
    d, n, k, h = x_BLD.shape[-1], self.num_heads, self.num_kv_heads, self.head_dim
    wq_DNH = self._kernel("query", (d, n, h), ("embed", "heads", "kv"), 0, (1, 2))
    wk_DKH = self._kernel("key", (d, k, h), ("embed", "kv_heads", "kv"), 0, (1, 2))
    wv_DKH = self._kernel("value", (d, k, h), ("embed", "kv_heads", "kv"), 0, (1, 2))
    wo_NHD = self._kernel("out", (n, h, d), ("heads", "kv", "embed"), (0, 1), 2)
    x_BLD = x_BLD.astype(self.dtype)
    q_BLNH = apply_rotary(project(x_BLD, wq_DNH), positions_BL, self.rope_theta)
    if self.query_scale != 1:
      q_BLNH = q_BLNH * jnp.asarray(self.query_scale, q_BLNH.dtype)
    k_BLKH = apply_rotary(project(x_BLD, wk_DKH), positions_BL, self.rope_theta)
    v_BLKH = project(x_BLD, wv_DKH)
    q_BLNH = mesh_lib.constrain(q_BLNH, ("activation_batch", "activation_length", "activation_heads", None))
    if decode:
      k_BLKH, v_BLKH = append_to_cache(self, k_BLKH, v_BLKH)
    out_BLNH = attention.attend(q_BLNH, k_BLKH, v_BLKH, mask, initializing=self.is_initializing())
    return project(out_BLNH, wo_NHD, contract=2)


def append_to_cache(module: nn.Module, k_BLKH, v_BLKH):
  """Writes keys and values at the cache index of `module`'s 'cache' collection; returns the whole cache.

  An `init` with decode=True sizes the cache (at the full decoding length)
  and attends as usual.
  """
  initialised = module.has_variable("cache", "key")
  key = module.variable("cache", "key", jnp.zeros, k_BLKH.shape, k_BLKH.dtype)
  value = module.variable("cache", "value", jnp.zeros, v_BLKH.shape, v_BLKH.dtype)
  index = module.variable("cache", "index", lambda: jnp.zeros((), jnp.int32))
  if not initialised:
    return k_BLKH, v_BLKH
  start = (0, index.value, 0, 0)
  key.value = jax.lax.dynamic_update_slice(key.value, k_BLKH, start)
  value.value = jax.lax.dynamic_update_slice(value.value, v_BLKH, start)
  index.value = index.value + k_BLKH.shape[1]
  return key.value, value.value


class SwiGLU(nn.Module):
  """Gated feed-forward: (silu(x W0) * x W1) Wo."""
  mlp_dim: int
  dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x_BLD):
    dense = functools.partial(Dense, dtype=self.dtype)
    gate_BLF = dense(self.mlp_dim, kernel_init=kernel_init("embed", "mlp"), name="wi_0")(x_BLD)
    up_BLF = dense(self.mlp_dim, kernel_init=kernel_init("embed", "mlp"), name="wi_1")(x_BLD)
    h_BLF = mesh_lib.constrain(nn.silu(gate_BLF) * up_BLF, ("activation_batch", "activation_length", "activation_mlp"))
    return dense(x_BLD.shape[-1], kernel_init=kernel_init("mlp", "embed"), name="wo")(h_BLF)


def mean_pool(x_BLD, segment_ids_BL):
  """The mean of each row's states over its tokens (segment id > 0), in float32: the representation of a
  sentence (pair) for the sentence-level heads and the contrastive objective; zeros for an empty row."""
  mask_BL1 = (segment_ids_BL > 0)[..., None].astype(jnp.float32)
  return jnp.sum(x_BLD.astype(jnp.float32) * mask_BL1, axis=1) / jnp.maximum(jnp.sum(mask_BL1, axis=1), 1.0)
