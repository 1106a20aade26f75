"""A mixture-of-experts feed-forward block (Switch Transformer, GShard, Mixtral, Qwen-MoE), in place of SwiGLU.

Letters as in layers.py, and: T tokens (B x L flattened), E experts, k the experts per token (top_k), A the
T x k assignments of tokens to experts, C an expert's capacity.

A float32 router scores the experts of each token; the top_k are its experts, weighted by their router
probabilities (renormalised over the k, as Mixtral, unless `normalize_top_k` is off: Switch's top-1 keeps the
raw probability). Each expert is a feed-forward of width mlp_dim, as the family's dense one, by `activation`:
SwiGLU (decoder-only), gated GELU (T5 v1.1) or plain ReLU (T5 v1.0, Switch). Two dispatches compute the same
thing:

- dropless (capacity_factor 0): the assignments sorted by expert, each expert's rows one group of a grouped
  matmul (jax.lax.ragged_dot; on CPUs blocks of one expert's rows, blocked_experts); no token is dropped. On a
  mesh each device sorts its own tokens and runs its own experts (partitioned: shard_map).
- capacity (capacity_factor > 0): in each row (a group, as GShard's), each expert takes at most
  C = ceil(capacity_factor x L x k / E) assignments, the first come in GShard's order (every token's first choice
  before any second choice, tokens in order); an assignment over capacity is dropped: the token's other experts
  and the residual carry it. One-hot dispatch and combine tensors [B, L, k, E, C], as GShard and Switch.

Optional shared experts (Qwen-MoE): a SwiGLU of width shared_mlp_dim that every token passes through, scaled by
a sigmoid gate of the token.

Sown into the 'moe' collection, per layer, for the loss and the metrics:
- load_balance: E x sum_e f_e x P_e (Switch, GShard), f_e the share of assignments routed to e, P_e its mean
  router probability; 1 when balanced. (transformers' Mixtral loss is k times this.)
- z_loss: the mean over tokens of logsumexp(router logits)^2 (ST-MoE).
- dropped: the share of assignments over capacity (0 when dropless).
- load [E]: f_e, the share of assignments routed to each expert.
"""

import dataclasses
import functools
import math
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from pretrain.models import layers
from pretrain.parallel import platform

Dtype = jnp.dtype


def route(logits_TE, top_k: int, normalize_top_k: bool):
  """(weights_TK, experts_TK, probs_TE): the top_k experts of each token and their weights."""
  probs_TE = jax.nn.softmax(logits_TE.astype(jnp.float32), axis=-1)
  weights_TK, experts_TK = jax.lax.top_k(probs_TE, top_k)
  if normalize_top_k:
    weights_TK = weights_TK / jnp.sum(weights_TK, axis=-1, keepdims=True)
  return weights_TK, experts_TK, probs_TE


def auxiliary(logits_TE, probs_TE, experts_TK, num_experts: int) -> dict:
  """The load-balancing and z losses and each expert's share of the assignments."""
  load_E = jnp.mean(jax.nn.one_hot(experts_TK, num_experts, dtype=jnp.float32), axis=(0, 1))
  return {"load_balance": num_experts * jnp.sum(load_E * jnp.mean(probs_TE, axis=0)),
          "z_loss": jnp.mean(jax.nn.logsumexp(logits_TE.astype(jnp.float32), axis=-1) ** 2),
          "load": load_E}


ACTIVATIONS = {"silu": nn.silu, "gelu": functools.partial(nn.gelu, approximate=True), "relu": nn.relu}


def _feed_forward(matmul, x, kernels, activation: str):
  """An expert's feed-forward with `matmul`: gated, act(x W0) * x W1 then Wo, of kernels (W0, W1, Wo); plain,
  act(x Wi) then Wo (T5 v1.0's and Switch's ReLU layers), of kernels (Wi, Wo)."""
  *wi, wo = kernels
  h = ACTIVATIONS[activation](matmul(x, wi[0]))
  return matmul(h * matmul(x, wi[1]) if len(wi) == 2 else h, wo)


def experts(x_XD, kernels, activation: str, group_sizes_E=None):
  """Each expert's feed-forward (_feed_forward): of its group of rows of x (grouped matmuls) with
  `group_sizes_E`, else of x [..., E, C, D]."""
  if group_sizes_E is None:
    return _feed_forward(lambda x, w: jnp.einsum("...ecd,edf->...ecf", x, w), x_XD, kernels, activation)
  return _feed_forward(lambda x, w: jax.lax.ragged_dot(x, w, group_sizes_E), x_XD, kernels, activation)


BLOCK = 128  # rows of one expert that blocked_experts multiplies at a time


def blocked_experts(x_AD, kernels, activation: str, group_sizes_E, block: int = BLOCK):
  """experts() of rows sorted by expert (`group_sizes_E` of each; rows past them give zeros, as ragged_dot's), as
  blocks of `block` rows of one expert each (each expert's rows padded to a multiple of it), multiplied by their
  expert's kernels gathered per block: the work of the rows, plus the padding.

  For CPUs, where jax.lax.ragged_dot multiplies every row by every expert's kernel and masks (E times the work:
  4.1x the dense step in the quickstart_moe benchmark, tools/bench_train.md); accelerators have grouped kernels,
  and would not want the kernels copied per block."""
  a, d = x_AD.shape
  e = kernels[0].shape[0]
  padded_E = (group_sizes_E + block - 1) // block * block
  padded_end_E = jnp.cumsum(padded_E)
  expert_A = jnp.repeat(jnp.arange(e), group_sizes_E, total_repeat_length=a)
  row_A = jnp.arange(a) - (jnp.cumsum(group_sizes_E) - group_sizes_E)[expert_A] + (padded_end_E - padded_E)[expert_A]
  blocks = (a + e * (block - 1)) // block  # At most this many, whatever the group sizes.
  row_A = jnp.where(jnp.arange(a) < jnp.sum(group_sizes_E), row_A, blocks * block)  # Rows past the groups: none.
  x_NBD = jnp.zeros((blocks * block, d), x_AD.dtype).at[row_A].set(x_AD, mode="drop").reshape(blocks, block, d)
  expert_N = jnp.minimum(jnp.searchsorted(padded_end_E, jnp.arange(blocks) * block, side="right"), e - 1)
  out_NBD = _feed_forward(lambda x, w: jnp.einsum("nbd,ndf->nbf", x, w[expert_N]), x_NBD, kernels, activation)
  return out_NBD.reshape(blocks * block, -1).at[row_A].get(mode="fill", fill_value=0)


def dropless(x_TD, weights_TK, experts_TK, num_experts: int, kernels, activation: str = "silu",
             grouped_matmul: str = "auto"):
  """Every assignment computed: sorted by expert, grouped matmuls, then weighted back onto its token. An
  assignment to an expert id of num_experts or over is skipped (another device's expert, in partitioned()).
  `grouped_matmul`: ragged_dot (jax.lax.ragged_dot), blocks (blocked_experts), or auto: blocks on CPUs."""
  t, k = experts_TK.shape
  order_A = jnp.argsort(experts_TK.reshape(-1), stable=True)
  group_sizes_E = jnp.bincount(experts_TK.reshape(-1), length=num_experts).astype(jnp.int32)
  if grouped_matmul == "blocks" or grouped_matmul == "auto" and platform.current() == "cpu":
    out_AD = blocked_experts(x_TD[order_A // k], kernels, activation, group_sizes_E)
  else:
    out_AD = experts(x_TD[order_A // k], kernels, activation, group_sizes_E=group_sizes_E)
  out_TKD = jnp.zeros_like(out_AD).at[order_A].set(out_AD).reshape(t, k, -1)
  return jnp.einsum("tkd,tk->td", out_TKD, weights_TK.astype(out_TKD.dtype))


def _mesh_axes(axes) -> tuple:
  return tuple(a for a in (axes if isinstance(axes, tuple) else (axes,)) if a)


def partitioned(x_TD, weights_TK, experts_TK, num_experts: int, kernels, activation: str = "silu",
                grouped_matmul: str = "auto"):
  """dropless() on each device, over the mesh axes of the rules (shard_map): a device sorts only the tokens it
  holds and runs only the experts it holds, so neither the tokens nor the experts are gathered whole (XLA's
  partitioning of the global sort replicated both). Over the expert axes (mesh axes of 'exp') the devices
  all-gather their tokens, each computes its own experts' share of every token, and a reduce-scatter sums the
  shares back onto the tokens' devices: dropless expert parallelism for the tokens x expert axis size held on
  each device during the layer. Over the 'mlp' axes (tensor parallelism) each device computes its slice of the
  experts' width, summed. Without a mesh, or where the rules split rows and the experts' width over one axis,
  dropless() as is, partitioned by XLA."""
  compute = functools.partial(dropless, activation=activation, grouped_matmul=grouped_matmul)
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return compute(x_TD, weights_TK, experts_TK, num_experts, kernels)
  size = lambda axes: math.prod(mesh.shape[a] for a in axes)
  # One name at a time: a spec of several would not map two names to one mesh axis (rows and experts do).
  rows, exp, mlp = (_mesh_axes(nn.logical_to_mesh_axes((name,))[0]) for name in ("activation_batch", "exp", "mlp"))
  rows = rows if x_TD.shape[0] % size(rows) == 0 else ()  # `init`'s example row, say.
  if set(mlp) & set(rows) or num_experts % size(exp) or kernels[-1].shape[1] % size(mlp):
    return compute(x_TD, weights_TK, experts_TK, num_experts, kernels)
  gathered = tuple(a for a in exp if a in rows)  # Tokens differ over these: gather them, then scatter back.
  replicated = tuple(a for a in exp if a not in rows)  # Tokens the same over these, each expert's share differs.
  summed = replicated + mlp  # Each device holds a part of the sum over these.

  def on_device(x_TD, weights_TK, experts_TK, *kernels):
    if gathered:
      x_TD, weights_TK, experts_TK = (jax.lax.all_gather(a, gathered, tiled=True)
                                      for a in (x_TD, weights_TK, experts_TK))
    if replicated:  # Said outright: a gather by indices that differ over these axes (each device's own order)
      # of an operand that does not leaves the operand's gradient unsummed over them (jax 0.10).
      x_TD, weights_TK = (jax.lax.pcast(a, replicated, to="varying") for a in (x_TD, weights_TK))
    mine = kernels[0].shape[0]
    first = jax.lax.axis_index(exp) * mine if exp else 0
    local_TK = jnp.where((experts_TK >= first) & (experts_TK < first + mine), experts_TK - first, mine)
    y_TD = compute(x_TD, jnp.where(local_TK < mine, weights_TK, 0), local_TK, mine, kernels)
    if gathered:
      y_TD = jax.lax.psum_scatter(y_TD, gathered, scatter_dimension=0, tiled=True)
    return jax.lax.psum(y_TD, summed) if summed else y_TD

  rows_spec = P(rows or None, None)
  as_spec = lambda axes: axes or None
  kernel_specs = [P(as_spec(exp), None, as_spec(mlp))] * (len(kernels) - 1) + [P(as_spec(exp), as_spec(mlp), None)]
  return jax.shard_map(on_device, in_specs=(rows_spec, rows_spec, rows_spec, *kernel_specs),
                       out_specs=rows_spec)(x_TD, weights_TK, experts_TK, *kernels)


def capacity(num_assignments: int, num_experts: int, factor: float) -> int:
  return max(1, math.ceil(factor * num_assignments / num_experts))


def with_capacity(x_GSD, weights_GSK, experts_GSK, num_experts: int, factor: float, kernels, activation: str = "silu"):
  """Per group of S tokens (a row: GShard's groups, MaxText's per-sequence capacity), at most `capacity`
  assignments per expert, first come first served in GShard's order; returns the output and the share of
  assignments dropped. Per row, the dispatch tensors grow with the row's length squared, not the batch's."""
  g, s, k = experts_GSK.shape
  c = capacity(s * k, num_experts, factor)
  mask_GKSE = jax.nn.one_hot(experts_GSK.transpose(0, 2, 1), num_experts, dtype=jnp.int32)  # First choices first.
  position_GKSE = jnp.cumsum(mask_GKSE.reshape(g, k * s, num_experts), axis=1).reshape(g, k, s, num_experts) - 1
  kept_GKSE = mask_GKSE * (position_GKSE < c)
  dispatch_GSKEC = (kept_GKSE[..., None] * jax.nn.one_hot(position_GKSE, c, dtype=jnp.int32)).transpose(0, 2, 1, 3, 4)
  dispatch_GSKEC = dispatch_GSKEC.astype(x_GSD.dtype)
  # Each expert's rows where its parameters are (mesh.expert): GShard's all-to-all, as XLA partitions it.
  x_GECD = nn.with_logical_constraint(jnp.einsum("gskec,gsd->gecd", dispatch_GSKEC, x_GSD),
                                      (None, "exp", None, "activation_embed"))
  out_GECD = experts(x_GECD, kernels, activation)
  y_GSD = jnp.einsum("gskec,gsk,gecd->gsd", dispatch_GSKEC, weights_GSK.astype(x_GSD.dtype), out_GECD)
  return y_GSD, 1.0 - jnp.sum(kept_GKSE) / (g * s * k)


@dataclasses.dataclass(frozen=True)
class MoEConfig:
  """The model config's moe_* fields (model.moe_experts, ...): where a model's feed-forward layers are MoE."""
  experts: int = 0  # 0: every feed-forward layer dense
  top_k: int = 2
  every: int = 1  # every n-th layer is MoE (Switch: 2), the others dense
  capacity_factor: float = 0.0  # 0: dropless
  mlp_dim: int = 0  # each expert's width; 0: model.mlp_dim
  shared_mlp_dim: int = 0
  router_jitter: float = 0.0
  normalize_top_k: bool = True
  grouped_matmul: str = "auto"  # the dropless dispatch's: ragged_dot | blocks | auto (blocks on CPUs)

  @classmethod
  def from_config(cls, model_cfg) -> "MoEConfig":
    return cls(**{f.name: model_cfg[f"moe_{f.name}"] for f in dataclasses.fields(cls) if f"moe_{f.name}" in model_cfg})

  @property
  def layer_every(self) -> int:
    """layers.repeat's moe_every: 0 for a dense model."""
    return self.every if self.experts else 0

  def block(self, dense_mlp_dim: int, activation: str, dtype, name: str = "moe", per_device: bool = True) -> "MoE":
    return MoE(self.experts, self.top_k, self.mlp_dim or dense_mlp_dim, self.capacity_factor, self.normalize_top_k,
               self.router_jitter, self.shared_mlp_dim, activation, dtype, self.grouped_matmul, per_device,
               name=name)


class MoE(nn.Module):
  """Top-k routed experts (and optional gated shared experts) in place of a dense feed-forward layer."""
  num_experts: int
  top_k: int
  mlp_dim: int  # each expert's width
  capacity_factor: float = 0.0  # 0: dropless
  normalize_top_k: bool = True
  router_jitter: float = 0.0  # Switch's multiplicative input noise in training, uniform in 1 +- jitter
  shared_mlp_dim: int = 0
  activation: str = "silu"  # silu (SwiGLU experts) | gelu (gated GELU, T5 v1.1) | relu (plain ReLU: T5 v1.0, Switch)
  dtype: Dtype = jnp.float32
  grouped_matmul: str = "auto"  # dropless(): ragged_dot | blocks | auto (blocks on CPUs)
  # Dropless dispatch per device (partitioned()), or as XLA partitions it: in a pipeline's stages, where jax 0.10
  # cannot differentiate a shard_map vmapped over the stage axis ("vmap spmd_axis_name cannot appear in
  # shard_map out_specs", from the residuals of its linearisation).
  per_device: bool = True

  @nn.compact
  def __call__(self, x_BLD, deterministic: bool = True):
    b, l, d = x_BLD.shape
    e, f = self.num_experts, self.mlp_dim
    x_TD = x_BLD.reshape(b * l, d)
    router_input = x_TD.astype(jnp.float32)
    if self.router_jitter and not deterministic:
      noise = jax.random.uniform(self.make_rng("dropout"), router_input.shape, jnp.float32,
                                 1 - self.router_jitter, 1 + self.router_jitter)
      router_input = router_input * noise
    router_DE = self.param("router", layers.kernel_init("embed", None), (d, e), jnp.float32)
    logits_TE = router_input @ router_DE
    weights_TK, experts_TK, probs_TE = route(logits_TE, self.top_k, self.normalize_top_k)

    def kernel(name, shape, axes, in_axis, out_axis):
      init = layers.kernel_init(*axes, in_axis=in_axis, out_axis=out_axis, batch_axis=0)
      return self.param(name, init, shape, jnp.float32).astype(self.dtype)

    inputs = ("wi",) if self.activation == "relu" else ("wi_0", "wi_1")  # Plain ReLU experts, or gated ones.
    kernels = (*(kernel(name, (e, d, f), ("exp", "embed", "mlp"), 1, 2) for name in inputs),
               kernel("wo", (e, f, d), ("exp", "mlp", "embed"), 1, 2))
    x_TD = x_TD.astype(self.dtype)
    if self.capacity_factor:
      y_BLD, dropped = with_capacity(x_TD.reshape(b, l, d), weights_TK.reshape(b, l, -1),
                                     experts_TK.reshape(b, l, -1), e, self.capacity_factor, kernels, self.activation)
      y_TD = y_BLD.reshape(b * l, d)
    else:
      y_TD = (partitioned(x_TD, weights_TK, experts_TK, e, kernels, self.activation, self.grouped_matmul)
              if self.per_device else dropless(x_TD, weights_TK, experts_TK, e, kernels, self.activation,
                                               self.grouped_matmul))
      dropped = jnp.zeros((), jnp.float32)
    for name, value in {**auxiliary(logits_TE, probs_TE, experts_TK, e), "dropped": dropped}.items():
      self.sow("moe", name, value)
    y_BLD = y_TD.reshape(b, l, d)
    if self.shared_mlp_dim:
      gate_BL1 = nn.sigmoid(layers.Dense(1, dtype=jnp.float32, kernel_init=layers.kernel_init("embed", None),
                                         name="shared_gate")(x_BLD.astype(jnp.float32)))
      shared_BLD = layers.SwiGLU(self.shared_mlp_dim, dtype=self.dtype, name="shared")(x_BLD)
      y_BLD = y_BLD + (gate_BL1 * shared_BLD).astype(y_BLD.dtype)
    return y_BLD


def _layer_order(path) -> tuple:
  """A sort key of a parameter path: the encoder's layers before the decoder's, layer_10 after layer_9."""
  name = jax.tree_util.keystr(path)
  return "encoder" not in name, [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def collected(moe_state) -> dict:
  """The values the MoE layers of a model sowed (its 'moe' collection), by name, stacked over the layers in
  their order (a scanned stack's layers in scan order): {'load_balance': [layers], ..., 'load': [layers, E]};
  {} for a dense model. The layers are in the encoder's order, then the decoder's."""
  by_name = {}
  leaves = jax.tree_util.tree_flatten_with_path(moe_state, is_leaf=lambda x: isinstance(x, tuple))[0]
  for path, sown in sorted(leaves, key=lambda item: _layer_order(item[0])):
    name = path[-1].key
    for value in sown:  # One per call: the layer's, or under nn.scan the scanned layers' stacked on axis 0.
      expected = 1 if name == "load" else 0
      by_name.setdefault(name, []).extend([value] if value.ndim == expected else list(value.reshape(
          -1, *value.shape[value.ndim - expected:])))
  return {name: jnp.stack(values) for name, values in by_name.items()}
