"""How attention is computed: the implementations behind model.attention, and the mask they share.

  xla        einsums over [B, K, G, L, S] logits with a materialised [B, 1, L, S] mask (any mask, any bias)
  splash     Pallas splash attention, the TPU kernel: segment ids, causal or not, no bias
  gpu_flash  Pallas flash attention for GPUs (Triton): one segment-id row for queries and keys, causal or not
  auto       splash on TPUs, gpu_flash on GPUs, xla elsewhere

Under a context axis (parallel/mesh.py) each device holds L / context of a
row's queries and gathers the row's keys and values: its queries attend over
the whole row, masks and positions as without the split.

The kernels never materialise the mask or the [L, S] scores. Where one cannot
express an attention (T5's relative-position bias, a per-example prefix-LM
prefix, decoding over a cache, lengths its blocks do not tile), that attention
takes the XLA path and the run logs why, once. Off their own platform the
kernels run in Pallas interpret mode: slow, exact, what the tests use.
Shape letters as in layers.py.
"""

import functools

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from pretrain.parallel import mesh as mesh_lib, platform
from pretrain.system import console

KERNEL_PLATFORM = {"splash": "tpu", "gpu_flash": "gpu"}
KERNEL_TILE = 128  # Both kernels' lengths must be multiples of this (splash's lane width; the GPU kernel's block).
CAUSAL_BLOCKS = 4  # The XLA path takes causal attention over L >= 256 keys in query blocks (see xla_attention).


@functools.cache
def log_once(message: str) -> None:
  console.log(message)


def choose(requested: str, query_length: int, key_length: int, *, bias: bool = False, prefix: bool = False,
           cross: bool = False) -> str:
  """The implementation an attention takes: `requested` (model.attention), or the XLA path where that kernel
  cannot express it (logged once, with the reason)."""
  here = platform.current()  # The mesh's: a TPU slice's when compiled for one from a CPU machine.
  name = requested if requested != "auto" else {"tpu": "splash", "gpu": "gpu_flash"}.get(here, "xla")
  if name == "xla":
    return name
  split = mesh_lib.split_length()
  reason = ("takes no additive bias (T5's relative positions)" if bias else
            "cannot see a per-example prefix (prefix LM)" if prefix else
            "takes one segment-id row for queries and keys, not cross-attention" if cross and name == "gpu_flash" else
            f"needs lengths that are multiples of {KERNEL_TILE}, not {query_length} x {key_length}"
            if query_length % KERNEL_TILE or key_length % KERNEL_TILE else
            "cannot split a row's queries over the context axis" if name == "gpu_flash" and split > 1 else
            f"needs each device's share of a row under the context axis ({query_length} / {split}) a multiple of "
            f"{KERNEL_TILE}" if query_length // split % KERNEL_TILE else "")
  if reason:
    log_once(f"attention: {name} {reason}; that attention takes the XLA path")
    return "xla"
  if here != KERNEL_PLATFORM[name]:
    log_once(f"attention: {name} runs in Pallas interpret mode on {here} (exact, slow)")
  return name


def dense_mask(query_segments_BL, key_segments_BS, causal: bool, prefix_BL=None):
  """[B, 1, L, S] boolean: which key each query may see. Never across packed segments (0 is padding); with
  `causal`, no later key, except among prefix positions (`prefix_BL`, seqio's decoder_causal_attention: the
  inputs of a prefix-LM example plus one), which see each other."""
  visible_BLS = query_segments_BL[:, :, None] == key_segments_BS[:, None, :]
  if causal:
    later_BLS = jnp.tril(jnp.ones((query_segments_BL.shape[1], key_segments_BS.shape[1]), jnp.bool_))[None]
    if prefix_BL is not None:
      prefix_BL = prefix_BL.astype(jnp.bool_)
      later_BLS = later_BLS | (prefix_BL[:, :, None] & prefix_BL[:, None, :])
    visible_BLS &= later_BLS
  return visible_BLS[:, None]


@flax.struct.dataclass
class Mask:
  """Which keys each query sees, and the implementation that applies it (made once per stack, by `build`).

  The kernels read the segment ids and `causal`; the XLA path reads `dense_B1LS`. `causal` (every later key
  hidden, keys and queries the same positions) also lets the XLA path skip masked blocks.
  """
  query_segments_BL: jax.Array | None
  key_segments_BS: jax.Array | None
  dense_B1LS: jax.Array | None
  causal: bool = flax.struct.field(pytree_node=False, default=False)
  implementation: str = flax.struct.field(pytree_node=False, default="xla")

  @classmethod
  def build(cls, requested: str, segments_BL, causal: bool, prefix_BL=None, bias: bool = False,
            key_segments_BS=None) -> "Mask":
    """The mask of a training-time attention for `requested` (model.attention): self-attention among
    `segments_BL`, or cross-attention from them to `key_segments_BS` (see dense_mask)."""
    cross = key_segments_BS is not None
    key_segments_BS = segments_BL if key_segments_BS is None else key_segments_BS
    name = choose(requested, segments_BL.shape[1], key_segments_BS.shape[1], bias=bias,
                  prefix=prefix_BL is not None, cross=cross)
    dense = dense_mask(segments_BL, key_segments_BS, causal, prefix_BL) if name == "xla" else None
    return cls(segments_BL, key_segments_BS, dense, causal and prefix_BL is None, name)

  @classmethod
  def explicit(cls, dense_B1LS) -> "Mask":
    """A given [B or 1, 1, L, S] mask (decoding over a cache): the XLA path."""
    return cls(None, None, dense_B1LS)


def attend(q_BLNH, k_BSKH, v_BSKH, mask: Mask, bias_1NLS=None, scale=None, initializing=False):
  """softmax(q k * scale + bias, where `mask` allows) v, by `mask.implementation`; scale defaults to H^-0.5.
  `initializing` (the module's init, which keeps only parameters): the queries, standing in for what nothing
  reads, so no kernel builds its mask tables (a minute for rows of 128k) and no scores are traced."""
  if initializing:
    return q_BLNH
  scale = q_BLNH.shape[-1] ** -0.5 if scale is None else scale
  if mesh_lib.split_length() > 1:  # Context parallelism: this device's queries see the whole row's keys.
    k_BSKH, v_BSKH = (mesh_lib.constrain(x, ("activation_batch", None, "activation_heads", None))
                      for x in (k_BSKH, v_BSKH))
  if mask.implementation == "xla":
    return xla_attention(q_BLNH, k_BSKH, v_BSKH, mask.dense_B1LS, bias_1NLS, scale, mask.causal)
  assert bias_1NLS is None, "Mask.build sends biased attention to the XLA path"
  args = (q_BLNH, k_BSKH, v_BSKH, mask.query_segments_BL, mask.key_segments_BS)
  if mask.implementation == "gpu_flash":
    return _sharded(functools.partial(_gpu_flash, scale=scale, causal=mask.causal), *args)
  tables = lambda heads, shards: _splash_kernel(heads, q_BLNH.shape[1], k_BSKH.shape[1], mask.causal, shards)
  return _sharded(functools.partial(_splash, scale=scale), *args, tables=tables)


def xla_attention(q_BLNH, k_BSKH, v_BSKH, mask_B1LS, bias_1NLS=None, scale=None, causal=False):
  """The XLA path, computed as jax.nn.dot_product_attention's (logits and softmax in float32), written as
  einsums on [B, K, G, L, S] logits (or [B, N, L, S]): its per-group vmap left broadcasts and layout copies
  of the logits that took most of the attention's time on a CPU.

  `causal` says the mask hides every key after its query (keys and queries the same positions): the
  queries are then taken in CAUSAL_BLOCKS blocks, each reading the keys up to its own end, which skips
  most of the masked half of the logits (3/8 of them with 4 blocks). Values equal the whole computation's.
  Not under a context axis: there each device's queries are one block already.
  """
  length = q_BLNH.shape[1]
  if causal and length >= 256 and length % CAUSAL_BLOCKS == 0 and mesh_lib.split_length() == 1:
    block = length // CAUSAL_BLOCKS
    pieces = []
    for end in range(block, length + 1, block):
      rows, keys = slice(end - block, end), slice(0, end)
      pieces.append(xla_attention(
          q_BLNH[:, rows], k_BSKH[:, keys], v_BSKH[:, keys], mask_B1LS[:, :, rows, keys],
          None if bias_1NLS is None else bias_1NLS[:, :, rows, keys], scale))
    return jnp.concatenate(pieces, axis=1)
  b, l, n, h = q_BLNH.shape
  k = k_BSKH.shape[2]
  # Logits [B, K, G, L, S] (G query heads per key head), or [B, N, L, S] where G is 1: a size-1 group axis
  # made XLA:CPU compute the logits transposed and copy them back, in both directions (a quarter of the
  # attention's time).
  heads, (to_logits, to_output) = ((n,), ("BLNH,BSNH->BNLS", "BNLS,BSNH->BLNH")) if k == n else (
      (k, n // k), ("BLKGH,BSKH->BKGLS", "BKGLS,BSKH->BLKGH"))
  logits = jnp.einsum(to_logits, q_BLNH.reshape(b, l, *heads, h), k_BSKH, preferred_element_type=jnp.float32)
  logits *= jnp.float32(h ** -0.5 if scale is None else scale)
  if bias_1NLS is not None:
    logits = add_batch_shared(logits, bias_1NLS.astype(jnp.float32).reshape(1, *heads, *bias_1NLS.shape[2:]))
  mask = mask_B1LS.reshape(mask_B1LS.shape[0], *(1 for _ in heads), *mask_B1LS.shape[2:])
  probs = jax.nn.softmax(jnp.where(mask, logits, jnp.finfo(jnp.float32).min), axis=-1).astype(v_BSKH.dtype)
  return jnp.einsum(to_output, probs, v_BSKH).reshape(b, l, n, h)


@jax.custom_vjp
def add_batch_shared(x, shared):
  """x + `shared`, which has a batch axis of 1: the same for every row of x. Its gradient sums x's over the
  batch as a [1, B] x [B, rest] matmul: XLA:CPU's YNNPACK reduction over a leading axis ran 40x slower than
  that (T5's relative-position bias, shared by every layer's logits: 0.5 s of the 6 s benchmark step)."""
  return x + shared


def _add_batch_shared_fwd(x, shared):
  return x + shared, None


def _add_batch_shared_bwd(_, dx):
  rows = dx.shape[0]
  dshared = jax.lax.dot(jnp.ones((1, rows), dx.dtype), dx.reshape(rows, -1)).reshape(1, *dx.shape[1:])
  return dx, dshared


add_batch_shared.defvjp(_add_batch_shared_fwd, _add_batch_shared_bwd)


def _sharded(kernel, q_BLNH, k_BSKH, v_BSKH, query_segments_BL, key_segments_BS, tables=None):
  """`kernel` on each device's rows and heads (shard_map over the mesh axes of activation_batch and
  activation_heads, where they divide the batch and the heads): a Pallas call has no partitioning rule of its
  own. Without a mesh, called as is. Keys and values stay whole along the row; the queries too, unless the
  kernel takes `tables(heads, query_shards)`: mask tables made for a split of the queries (splash's), its first
  argument, with which each device takes its own queries of the context axis."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return kernel(*((tables(q_BLNH.shape[2], 1),) if tables else ()), q_BLNH, k_BSKH, v_BSKH, query_segments_BL,
                  key_segments_BS)
  size = lambda axes: mesh_lib.axes_size(mesh, axes)
  batch, length, heads = nn.logical_to_mesh_axes(("activation_batch", "activation_length", "activation_heads"))
  batch = batch if q_BLNH.shape[0] % size(batch) == 0 else None  # `init`'s example row, say.
  heads = heads if q_BLNH.shape[2] % size(heads) == 0 else None
  length = length if tables and q_BLNH.shape[1] % size(length) == 0 else None
  if k_BSKH.shape[2] % size(heads):  # Fewer key/value heads than head shards: each shard takes its own copies.
    k_BSKH, v_BSKH = (jnp.repeat(x, q_BLNH.shape[2] // k_BSKH.shape[2], axis=2) for x in (k_BSKH, v_BSKH))
  rows, whole = P(batch, length, heads, None), P(batch, None, heads, None)
  specs = (rows, whole, whole, P(batch, length), P(batch, None))
  args = (q_BLNH, k_BSKH, v_BSKH, query_segments_BL, key_segments_BS)
  if tables:
    table = tables(q_BLNH.shape[2] // size(heads), size(length))
    table_spec = table.manual_sharding_spec(jax.sharding.NamedSharding(mesh, P(None, length)))
    specs, args = (table_spec, *specs), (table, *args)
  return jax.shard_map(kernel, in_specs=specs, out_specs=rows, check_vma=False)(*args)


def _block(length: int, largest: int = 512) -> int:
  """The largest of largest, largest / 2, ... (down to KERNEL_TILE) that divides `length`."""
  block = largest
  while length % block:
    block //= 2
  return block


def _splash_kernel(num_heads: int, query_length: int, key_length: int, causal: bool, query_shards: int = 1):
  """The splash kernel for these shapes, its queries split `query_shards` ways. Its mask tables are constants:
  made once, eagerly, and kept across traces; or, in a program compiled for another machine's devices (a TPU
  slice's, from a CPU), made in the trace, as eager arrays would land on devices that cannot run here."""
  if platform.current() != jax.default_backend():
    return _make_splash_kernel(num_heads, query_length, key_length, causal, query_shards, interpret=False)
  return _eager_splash_kernel(num_heads, query_length, key_length, causal, query_shards)


@functools.cache
def _eager_splash_kernel(num_heads: int, query_length: int, key_length: int, causal: bool, query_shards: int):
  with jax.ensure_compile_time_eval():
    return _make_splash_kernel(num_heads, query_length, key_length, causal, query_shards,
                               interpret=jax.default_backend() != "tpu")


def _make_splash_kernel(num_heads: int, query_length: int, key_length: int, causal: bool, query_shards: int,
                        interpret: bool):
  # pylint: disable-next=g-import-not-at-top  (a Pallas kernel: only when chosen)
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
  # pylint: disable-next=g-import-not-at-top  (a Pallas kernel: only when chosen)
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks
  shape = (query_length, key_length)
  head_mask = masks.CausalMask(shape) if causal else masks.FullMask(shape)
  bq, bkv = _block(query_length // query_shards), _block(key_length)
  sizes = splash.BlockSizes(block_q=bq, block_kv=bkv, block_kv_compute=bkv, block_q_dkv=bq, block_kv_dkv=bkv,
                            block_kv_dkv_compute=bkv, block_q_dq=bq, block_kv_dq=bkv)
  kernel = splash.make_splash_mha(masks.MultiHeadMask([head_mask] * num_heads), block_sizes=sizes,
                                  head_shards=1, q_seq_shards=query_shards, interpret=interpret)
  return kernel


def _splash(kernel, q_BLNH, k_BSKH, v_BSKH, query_segments_BL, key_segments_BS, scale):
  """Splash attention (head-major, one example at a time; grouped key/value heads as they are) by `kernel`
  (_splash_kernel's, its mask tables this device's share)."""
  # pylint: disable-next=g-import-not-at-top  (a Pallas kernel: only when chosen)
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
  one_example = lambda q_NLH, k_KSH, v_KSH, query_L, key_S: kernel(
      q_NLH * jnp.asarray(scale, q_NLH.dtype), k_KSH, v_KSH, segment_ids=splash.SegmentIds(q=query_L, kv=key_S))
  head_major = lambda x: jnp.swapaxes(x, 1, 2)
  out_BNLH = jax.vmap(one_example)(head_major(q_BLNH), head_major(k_BSKH), head_major(v_BSKH),
                                   query_segments_BL, key_segments_BS)
  return head_major(out_BNLH)


def _gpu_flash(q_BLNH, k_BSKH, v_BSKH, query_segments_BL, key_segments_BS, scale, causal):
  """Pallas flash attention for GPUs (one segment-id row: Mask.build sends cross-attention to the XLA path)."""
  del key_segments_BS
  # pylint: disable-next=g-import-not-at-top  (a Pallas kernel: only when chosen)
  from jax.experimental.pallas.ops.gpu import attention as gpu
  groups = q_BLNH.shape[2] // k_BSKH.shape[2]
  k_BSNH, v_BSNH = (jnp.repeat(x, groups, axis=2) if groups > 1 else x for x in (k_BSKH, v_BSKH))
  block = _block(q_BLNH.shape[1], largest=KERNEL_TILE)
  sizes = gpu.BlockSizes(block_q=block, block_k=block, block_q_dkv=32, block_kv_dkv=32, block_q_dq=32,
                         block_kv_dq=32)
  return gpu.mha(q_BLNH, k_BSNH, v_BSNH, query_segments_BL, sm_scale=scale, causal=causal, block_sizes=sizes,
                 interpret=platform.current() != "gpu")
