"""Pipeline parallelism: the scanned layers split into stages over the mesh's `stage` axis, the batch into
microbatches that flow through them (GPipe's schedule).

The parameters keep the layout of the unpipelined scan, [layers, ...] with the 'layers' axis split over the
stage axis (parallel/mesh.py's presets), so a checkpoint does not depend on the stage count: here each stage's
contiguous block of layers is a reshape to [stages, layers / stages, ...], free under that sharding.

Each of the microbatches + stages - 1 iterations runs every stage at once (nn.vmap over the stages, split over
the stage axis) on what the stage before it produced in the last iteration (a roll along the stage axis: one
collective permute). Gradients follow by autodiff, so the backward pass runs the schedule in reverse. A stage
idles (computes on padding) in stages - 1 of the iterations: the bubble.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from pretrain.parallel import mesh as mesh_lib

STATE = ("layers", "activation_batch", "activation_length", "activation_embed")  # [stages, rows, L, D]


def stages() -> int:
  """How many pipeline stages the active mesh and rules make: the devices the 'layers' axis is split over (1
  outside a mesh)."""
  mesh = jax.sharding.get_abstract_mesh()
  return 1 if mesh.empty else mesh_lib.axes_size(mesh, nn.logical_to_mesh_axes(("layers",))[0])


def bubble(num_stages: int, microbatches: int) -> float:
  """The fraction of a GPipe step each stage idles: (stages - 1) / (microbatches + stages - 1)."""
  return (num_stages - 1) / (microbatches + num_stages - 1)


def describe(num_stages: int, microbatches: int) -> str:
  """The line a pipelined run starts with."""
  return (f"Pipeline: {num_stages} stages (mesh.stage) x {microbatches} microbatches (train.microbatches), "
          f"GPipe's schedule: each stage idles {bubble(num_stages, microbatches):.0%} of a step (the bubble, "
          "(stages - 1) / (microbatches + stages - 1); more microbatches shrink it)")


def run(scanned, module_args: tuple, num_stages: int, microbatches: int, x_BLD, *shared):
  """`scanned` (an nn.scan of a block over layers / stages layers, named `layers` as the unpipelined scan) applied
  as `num_stages` stages to `x_BLD` [B, L, D] in `microbatches` microbatches (fewer when they do not divide B: an
  evaluation batch); `shared` (the mask, the positions) are per row, [B, ...]. Called from a compact method."""
  rows = x_BLD.shape[0]
  count = np.gcd(rows, microbatches)

  def split(a):  # Microbatch m holds rows m, m + count, ... (as the train step's gradient accumulation).
    return jnp.swapaxes(a.reshape(rows // count, count, *a.shape[1:]), 0, 1)

  def to_stages(variables):
    return jax.tree.map(lambda a: a.reshape(num_stages, a.shape[0] // num_stages, *a.shape[1:]), variables)

  staged = nn.vmap(scanned, variable_axes={"params": 0}, split_rngs={"params": True, "dropout": True},
                   in_axes=0, spmd_axis_name=nn.logical_to_mesh_axes(("layers",))[0])
  layers = nn.map_variables(staged, "params", trans_in_fn=to_stages)(*module_args, name="layers")
  inputs, shared = split(x_BLD), jax.tree.map(split, shared)
  state = jnp.zeros((num_stages, *inputs.shape[1:]), x_BLD.dtype)
  first = (np.arange(num_stages) == 0).reshape(-1, *(1,) * (state.ndim - 1))
  outputs = []
  for t in range(count + num_stages - 1):
    # Stage 0 takes the next microbatch, stage s what stage s - 1 produced.
    state = jnp.where(first, inputs[min(t, count - 1)], jnp.roll(state, 1, axis=0))
    state = mesh_lib.constrain(state, STATE)
    which = np.clip(t - np.arange(num_stages), 0, count - 1)  # the microbatch in each stage
    state = layers(state, *jax.tree.map(lambda a: a[which], shared))[0]
    if t >= num_stages - 1:
      outputs.append(state[-1])
  out = jnp.stack(outputs)  # [microbatches, rows / microbatches, L, D]
  return jnp.swapaxes(out, 0, 1).reshape(x_BLD.shape)
