"""The train state, created directly in its sharded layout."""

from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import optax

from pretrain.parallel import mesh as mesh_lib


class TrainState(flax.struct.PyTreeNode):
  step: jax.Array
  params: Any
  opt_state: Any


def _init_fn(model: nn.Module, tx: optax.GradientTransformation, example_args: tuple):
  def init(rng):
    params = model.init(rng, *example_args)["params"]  # Boxed with logical axis names.
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))
  return init


def shardings(model, tx, example_args, mesh, axis_rules):
  """The NamedSharding of every leaf of the (unboxed) train state."""
  abstract = jax.eval_shape(_init_fn(model, tx, example_args), jax.random.key(0))
  return mesh_lib.logical_shardings(nn.get_partition_spec(abstract), mesh, axis_rules)


def abstract(model, tx, example_args, state_shardings):
  """Shape, dtype and sharding of every leaf, without allocating (to restore into)."""
  init = _init_fn(model, tx, example_args)
  shapes = jax.eval_shape(lambda rng: nn.meta.unbox(init(rng)), jax.random.key(0))
  return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, state_shardings)


def create(model, tx, example_args, state_shardings, seed: int) -> TrainState:
  """Initialises parameters and optimizer state on their devices, never whole on one host."""
  init = _init_fn(model, tx, example_args)
  return jax.jit(lambda rng: nn.meta.unbox(init(rng)), out_shardings=state_shardings)(jax.random.key(seed))
