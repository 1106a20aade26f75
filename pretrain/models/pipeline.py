"""Pipeline parallelism: the scanned layers split into stages over the mesh's `stage` axis, the batch into
microbatches that flow through them, in GPipe's schedule or a circular one.

The parameters keep the layout of the unpipelined scan, [layers, ...] with the 'layers' axis split over the
stage axis (parallel/mesh.py's presets), so a checkpoint does not depend on the stage count.

Each iteration runs every stage at once (jax.vmap over the stages, split over the stage axis) on what the stage
before it produced in the last iteration (a roll along the stage axis: one collective permute). GPipe: stage s
holds layers s * L / S ... (s + 1) * L / S (a reshape, free under that sharding) and the step takes
microbatches + stages - 1 iterations. Circular (`repeats` R > 1, MaxText's and Megatron's interleaved schedule):
the layers form R x S chunks, stage s holding chunks s, S + s, 2 S + s, ..., and each microbatch passes through
the stages R times, which shrinks the idle share of a step (the bubble) about R-fold, at the cost of R times as
many activation hand-offs and of regrouping the layers once a step (an all-to-all of the layers' parameters
over the stage axis). Gradients follow by autodiff, so the backward pass runs the schedule in reverse.
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from pretrain.parallel import mesh as mesh_lib

STATE = ("layers", "activation_batch", "activation_length", "activation_embed")  # [stages, rows, L, D]


@dataclasses.dataclass(frozen=True)
class Schedule:
  stages: int        # mesh.stage
  microbatches: int  # train.microbatches
  repeats: int = 1   # mesh.stage_repeats: chunks of layers per stage (1: GPipe, more: circular)

  def period(self, microbatches: int) -> int:
    """Iterations between a microbatch's passes through stage 0 (it waits for the stages to drain)."""
    return max(microbatches, self.stages)

  def iterations(self, microbatches: int) -> int:
    return (self.repeats - 1) * self.period(microbatches) + microbatches + self.stages - 1

  @property
  def bubble(self) -> float:
    """The fraction of a step each stage idles: 1 - busy iterations / iterations ((S - 1) / (M + S - 1), GPipe's,
    for R = 1)."""
    return 1 - self.repeats * self.microbatches / self.iterations(self.microbatches)

  def describe(self) -> str:
    """The line a pipelined run starts with."""
    name = "GPipe's schedule" if self.repeats == 1 else f"a circular schedule of {self.repeats} repeats"
    return (f"Pipeline: {self.stages} stages (mesh.stage) x {self.microbatches} microbatches (train.microbatches), "
            f"{name}: each stage idles {self.bubble:.0%} of a step (the bubble; more microbatches, or "
            "mesh.stage_repeats, shrink it)")


def run(schedule: Schedule, apply, params, x_BLD, *shared, rng=None, remat: bool = False):
  """The layers whose stacked parameters `params` [layers, ...] are, applied to `x_BLD` [B, L, D] as the
  pipeline `schedule` (in fewer microbatches when they do not divide B: an evaluation batch). `apply(chunk,
  x_BLD, *shared, rng)` applies the layers of a chunk's parameters [layers / (stages x repeats), ...] in turn and
  returns (x_BLD, what its layers sowed: a tree of [layers of the chunk, ...] leaves, {} if none); `shared` (the
  mask, the positions) are per row, [B, ...]; `rng`, dropout's key or None. With `remat`, each iteration keeps
  only its stages' inputs for the backward pass, which recomputes the rest (a stage holds every microbatch's
  activations until the backward pass reaches them: its layers' inside would be microbatches x layers / stages
  of them).

  Returns (the output [B, L, D], what the layers sowed: each leaf [layers, ...] in the layers' order, the mean
  over the microbatches; the iterations a stage idles, on padding, are left out)."""
  stages, repeats = schedule.stages, schedule.repeats
  rows = x_BLD.shape[0]
  count = int(np.gcd(rows, schedule.microbatches))
  period = schedule.period(count)

  def split(a):  # Microbatch m holds rows m, m + count, ... (as the train step's gradient accumulation).
    return jnp.swapaxes(a.reshape(rows // count, count, *a.shape[1:]), 0, 1)

  def by_stage(a):  # [layers, ...] -> [stages, repeats, chunk, ...]: layer (r S + s) chunk + j at [s, r, j].
    return jnp.swapaxes(a.reshape(repeats, stages, a.shape[0] // (repeats * stages), *a.shape[1:]), 0, 1)

  params = jax.tree.map(by_stage, params)
  inputs, shared = split(x_BLD), jax.tree.map(split, shared)
  staged = jax.vmap(apply, spmd_axis_name=nn.logical_to_mesh_axes(("layers",))[0])
  staged = jax.checkpoint(staged) if remat else staged
  state = jnp.zeros((stages, *inputs.shape[1:]), x_BLD.dtype)
  first = (np.arange(stages) == 0).reshape(-1, *(1,) * (state.ndim - 1))
  returned, outputs = {}, []  # A microbatch's output of its last pass, until its next pass begins.
  sown = {}  # Chunk r S + s -> the sum of what its layers sowed over the microbatches.
  for t in range(schedule.iterations(count)):
    repeat, m = divmod(t, period)  # Stage 0's next microbatch, and its pass.
    incoming = inputs[min(m, count - 1)] if repeat == 0 else returned.get(m, inputs[0])
    state = jnp.where(first, incoming, jnp.roll(state, 1, axis=0))
    state = mesh_lib.constrain(state, STATE)
    passes, which = np.divmod(t - np.arange(stages), period)  # Each stage's microbatch and its pass.
    chunks = _chunks(params, np.clip(passes, 0, repeats - 1))
    keys = None if rng is None else jax.random.split(jax.random.fold_in(rng, t), stages)
    state, values = staged(chunks, state, *jax.tree.map(lambda a: a[np.clip(which, 0, count - 1)], shared), keys)
    for s in np.flatnonzero((passes >= 0) & (passes < repeats) & (which < count)):  # The stages not idling.
      value, chunk = jax.tree.map(lambda a: a[s], values), int(passes[s]) * stages + int(s)
      sown[chunk] = value if chunk not in sown else jax.tree.map(jnp.add, sown[chunk], value)
    done_repeat, done = divmod(t - stages + 1, period)  # What the last stage finished.
    if 0 <= done_repeat and done < count:
      if done_repeat == repeats - 1:
        outputs.append(state[-1])
      else:
        returned[done] = state[-1]
  out = jnp.stack(outputs)  # [microbatches, rows / microbatches, L, D]
  in_order = [sown[chunk] for chunk in range(stages * repeats)]
  means = jax.tree.map(lambda *chunks: jnp.concatenate(chunks) / count, *in_order)
  return jnp.swapaxes(out, 0, 1).reshape(x_BLD.shape), means


def _chunks(params, passes: np.ndarray):
  """Each stage's chunk of layers for its pass `passes[s]` (static): [stages, chunk, ...]. Stages are at most
  two passes apart, so a select between two slices, not a gather."""
  low, high = int(passes.min()), int(passes.max())
  if low == high:
    return jax.tree.map(lambda a: a[:, low], params)
  later = passes == high
  return jax.tree.map(lambda a: jnp.where(later.reshape(-1, *(1,) * (a.ndim - 2)), a[:, high], a[:, low]), params)
