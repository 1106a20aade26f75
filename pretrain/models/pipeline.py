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

  The iterations are one lax.scan, so the stages' layers are traced once, whatever the microbatches and stages.

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
  shared = jax.tree.map(split, shared)
  staged = jax.vmap(apply, spmd_axis_name=nn.logical_to_mesh_axes(("layers",))[0])
  staged = jax.checkpoint(staged) if remat else staged
  first = (np.arange(stages) == 0).reshape(-1, 1, 1, 1)

  def microbatch(a, m):  # a[m] of a [microbatches, ...] array, m traced.
    return jax.lax.dynamic_index_in_dim(a, m, keepdims=False)

  def iteration(carry, t):
    # `held`: each microbatch's input to its next pass (its rows, then its last pass's output); at the end, the
    # output of its last pass. `sown`: [stages, repeats, ...], what chunk r S + s sowed, summed over microbatches.
    state, held, sown = carry
    state = jnp.where(first, microbatch(held, jnp.minimum(t % period, count - 1)), jnp.roll(state, 1, axis=0))
    state = mesh_lib.constrain(state, STATE)
    passes, which = jnp.divmod(t - jnp.arange(stages), period)  # Each stage's microbatch and its pass.
    keys = None if rng is None else jax.random.split(jax.random.fold_in(rng, t), stages)
    state, values = staged(_chunks(params, t, schedule, period), state,
                           *jax.tree.map(lambda a: a[jnp.clip(which, 0, count - 1)], shared), keys)
    busy = (passes >= 0) & (passes < repeats) & (which < count)  # The stages not idling.
    slot = (jnp.arange(repeats) == passes[:, None]) & busy[:, None]  # [stages, repeats]
    sown = jax.tree.map(lambda total, v: total + jnp.where(slot.reshape(*slot.shape, *(1,) * (v.ndim - 1)),
                                                           v[:, None], 0), sown, values)
    done = t - stages + 1  # The last stage finished microbatch done % period's pass done // period.
    index = jnp.clip(done % period, 0, count - 1)
    finished = jnp.where((done >= 0) & (done % period < count), state[-1], microbatch(held, index))
    return (state, jax.lax.dynamic_update_index_in_dim(held, finished, index, 0), sown), None

  inputs = split(x_BLD)
  state = jnp.zeros((stages, *inputs.shape[1:]), x_BLD.dtype)
  values = jax.eval_shape(lambda *a: staged(*a)[1], _chunks(params, 0, schedule, period), state,
                          *jax.tree.map(lambda a: a[np.zeros(stages, int)], shared),
                          None if rng is None else jax.random.split(rng, stages))
  sown = jax.tree.map(lambda v: jnp.zeros((stages, repeats, *v.shape[1:]), v.dtype), values)
  (_, out, sown), _ = jax.lax.scan(iteration, (state, inputs, sown), jnp.arange(schedule.iterations(count)))
  # [stages, repeats, chunk, ...] -> [layers, ...], layer (r S + s) chunk + j from [s, r, j].
  means = jax.tree.map(lambda a: jnp.swapaxes(a, 0, 1).reshape(-1, *a.shape[3:]) / count, sown)
  return jnp.swapaxes(out, 0, 1).reshape(x_BLD.shape), means


def _chunks(params, t, schedule: Schedule, period: int):
  """Each stage's chunk of layers at iteration `t` (traced): [stages, chunk, ...], stage s's of its pass
  (t - s) // period. Stages are at most two passes apart (stage 0's and the last stage's), so a select between
  two slices, not a gather."""
  if schedule.repeats == 1:
    return jax.tree.map(lambda a: a[:, 0], params)
  stages, last = schedule.stages, schedule.repeats - 1
  high, low = jnp.clip(t // period, 0, last), jnp.clip((t - stages + 1) // period, 0, last)
  later = (jnp.clip((t - jnp.arange(stages)) // period, 0, last) == high)

  def select(a):
    at = lambda p: jax.lax.dynamic_index_in_dim(a, p, axis=1, keepdims=False)
    return jnp.where(later.reshape(-1, *(1,) * (a.ndim - 2)), at(high), at(low))
  return jax.tree.map(select, params)
