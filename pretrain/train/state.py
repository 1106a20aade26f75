"""The train state, created directly in its sharded layout."""

from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import optax
from jax.sharding import PartitionSpec as P

from pretrain.parallel import mesh as mesh_lib
from pretrain.system.errors import UserError


class TrainState(flax.struct.PyTreeNode):
  step: jax.Array
  params: Any
  opt_state: Any
  rng: jax.Array  # Key data (uint32) of the run's key; dropout folds in the step (and microbatch).


def _init_fn(model: nn.Module, tx: optax.GradientTransformation, example_args: tuple, init_scales=None):
  """Parameters are initialised in float32 and stored in model.param_dtype (bfloat16 halves them and the
  optimizer's moments); the layers cast them to model.dtype to compute, so only the storage changes.
  `init_scales` (a float per parameter, or None) multiplies the initialisation: muP's (models/mup.py)."""
  param_dtype = jnp.dtype(model.config.param_dtype)

  def init(rng):
    params = model.init(rng, *example_args)["params"]  # Boxed with logical axis names.
    if init_scales is not None:
      params = jax.tree.map(lambda box, s: box.replace_boxed(box.unbox() * s) if s != 1 else box, params, init_scales,
                            is_leaf=lambda x: isinstance(x, nn.meta.AxisMetadata))
    params = jax.tree.map(lambda p: p.astype(param_dtype), params)
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(nn.meta.unbox(params)),
                      rng=jax.random.key_data(rng))
  return init


def _optimizer_specs(opt_state, params, param_specs):
  """Logical specs of the optimizer state: a leaf shaped like a parameter, at
  a path ending in that parameter's path (Adam's moments), is laid out like
  it; others (counts, Adafactor's factored statistics, all small) are replicated."""
  by_path = {jax.tree_util.keystr(path): (leaf.shape, spec) for (path, leaf), spec in zip(
      jax.tree_util.tree_flatten_with_path(params)[0], jax.tree.leaves(param_specs, is_leaf=_is_spec))}

  def spec(path, leaf):
    name = jax.tree_util.keystr(path)
    matches = [(len(p), s) for p, (shape, s) in by_path.items() if name.endswith(p) and shape == leaf.shape]
    return max(matches, key=lambda m: m[0])[1] if matches else P()

  return jax.tree_util.tree_map_with_path(spec, opt_state)


def _is_spec(x):
  return isinstance(x, P)


def shardings(model, tx, example_args, init_scales, mesh, axis_rules):
  """The NamedSharding of every leaf of the (unboxed) train state."""
  init = _init_fn(model, tx, example_args, init_scales)
  abstract = jax.eval_shape(lambda: init(jax.random.key(0)))  # Traced: no array is made (on any device).
  param_specs = nn.get_partition_spec(abstract.params)
  params = jax.tree.map(lambda box: box.value, abstract.params, is_leaf=lambda x: isinstance(x, nn.meta.AxisMetadata))
  specs = TrainState(step=P(), params=param_specs,
                     opt_state=_optimizer_specs(abstract.opt_state, params, param_specs), rng=P())
  named = mesh_lib.logical_shardings(specs, mesh, axis_rules)
  _check_divisible(params, param_specs, named.params, mesh)
  return named


# The config field behind each logical axis of a parameter, for the fix of a size that its mesh axes do not divide.
_SIZE_FIELDS = {"heads": "model.num_heads", "kv_heads": "model.num_kv_heads", "mlp": "model.mlp_dim",
                "embed": "model.d_model", "vocab": "the vocabulary size (model.vocab_size, or the tokenizer's)",
                "exp": "model.moe_experts", "layers": "model.num_layers", "kv": "model.head_dim"}


def _check_divisible(params, param_specs, param_shardings, mesh) -> None:
  """A UserError naming the first parameter whose dimension its mesh axes do not divide (JAX would raise an
  IndivisibleError traceback at the first array placed), the config field behind it and the mesh axes."""
  leaves = jax.tree_util.tree_flatten_with_path(params)[0]
  for (path, leaf), names, sharding in zip(leaves, jax.tree.leaves(param_specs, is_leaf=_is_spec),
                                           jax.tree.leaves(param_shardings)):
    for dim, name, axes in zip(leaf.shape, names, sharding.spec):
      split = mesh_lib.axes_size(mesh, axes)
      if dim % split:
        axes = axes if isinstance(axes, tuple) else (axes,)
        sizes = " x ".join(f"mesh.{a}={mesh.shape[a]}" for a in axes)
        where = "/".join(str(getattr(k, "key", k)) for k in path)
        raise UserError(f"parameter {where} of shape {leaf.shape}: its {name!r} axis of {dim} does not split over "
                        f"{sizes} ({split} ways, mesh.rules); make {_SIZE_FIELDS.get(name, f'its {name} size')} "
                        f"a multiple of {split}, or shrink "
                        f"{' and '.join('mesh.' + a for a in axes)}")


def abstract(model, tx, example_args, init_scales, state_shardings):
  """Shape, dtype and sharding of every leaf, without allocating (to restore into)."""
  init = _init_fn(model, tx, example_args, init_scales)
  shapes = jax.eval_shape(lambda: nn.meta.unbox(init(jax.random.key(0))))
  return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, state_shardings)


def create(model, tx, example_args, init_scales, state_shardings, seed: int) -> TrainState:
  """Initialises parameters and optimizer state on their devices, never whole on one host."""
  init = _init_fn(model, tx, example_args, init_scales)
  return jax.jit(lambda rng: nn.meta.unbox(init(rng)), out_shardings=state_shardings)(jax.random.key(seed))
