"""The compiled train and eval steps."""

import jax
import jax.numpy as jnp
import optax

from pretrain.train import spike_guard as spike_guard_lib
from pretrain.train.state import TrainState


def microbatches(batch, count: int):
  """[B, ...] arrays as [count, B / count, ...]: microbatch m holds rows m, m + count, ...,
  so that each data shard's contiguous block of rows contributes to every microbatch."""
  return jax.tree.map(lambda x: jnp.swapaxes(x.reshape(x.shape[0] // count, count, *x.shape[1:]), 0, 1), batch)


def make_train_step(family, model, tx, lr_schedule, loss_cfg, num_microbatches: int = 1, members: int = 0,
                    spike_guard=None):
  """The step of `model`, fed by its `family` (pretrain.families), which computes the loss. The loss is
  summed over target tokens and divided by their number (the family's weight), or by `loss.normalizing_factor`
  when that is set (T5X's loss_normalizing_factor).
  With `num_microbatches` > 1 the gradients of the summed loss are accumulated
  over microbatches, one at a time, and divided once: the full batch's gradient of the token loss (a term that
  is a mean of its own, as NSP's pair loss or the MoE losses, enters as each microbatch's mean times its weight).
  Dropout masks derive from the state's RNG key, the step and the microbatch, so
  a resumed run draws the same ones. A step whose loss or gradient is not finite changes
  nothing and reports finite=False. `members` > 0: a schedule's members, whose losses are reported one by one
  (family.loss_sums). With `spike_guard` (the train config, train.spike_guard on) the step is
  (state, batch, the guard's arrays) -> (state, metrics, the guard's arrays): a step the guard judges a spike
  changes nothing but the step count (pretrain/train/spike_guard.py)."""
  per_member = {"members": members} if members else {}  # Families with loss terms of their own take none.

  def summed_grads(params, batch, rng):
    def loss_fn(params):
      sums = family.loss_sums(model, params, batch, loss_cfg, rng, **per_member)
      return sums["loss"], sums
    return jax.grad(loss_fn, has_aux=True)(params)

  def train_step(state: TrainState, batch, guard=None):
    rng = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
    if num_microbatches == 1:
      grads, sums = summed_grads(state.params, batch, rng)
    else:
      def accumulate(carry, micro_and_index):
        micro, index = micro_and_index
        grads, sums = summed_grads(state.params, micro, jax.random.fold_in(rng, index))
        return jax.tree.map(jnp.add, carry, (grads, sums)), None
      first = jax.tree.map(lambda x: x[0], microbatches(batch, num_microbatches))
      zeros = jax.tree.map(jnp.zeros_like, jax.eval_shape(summed_grads, state.params, first, rng))
      (grads, sums), _ = jax.lax.scan(accumulate, zeros,
                                      (microbatches(batch, num_microbatches), jnp.arange(num_microbatches)))
    if guard is not None:
      grads, sums = spike_guard_lib.poisoned(spike_guard, guard, state.step, grads, sums)
    weight = jnp.maximum(sums["weight"], 1.0)
    grads = jax.tree.map(lambda g: g / (loss_cfg.normalizing_factor or weight), grads)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    grad_norm = optax.tree.norm(grads)
    finite = jnp.isfinite(sums["loss"]) & jnp.isfinite(grad_norm)
    metrics = {**family.train_metrics(sums), "grad_norm": grad_norm, "learning_rate": lr_schedule(state.step),
               "finite": finite}
    # A diverged step is not applied, so the state stays the last good one.
    apply, kept = finite, state
    if guard is not None:
      updates, lowered = spike_guard_lib.slowed(spike_guard, guard, state.step, updates)
      metrics["learning_rate"] *= lowered
      apply, guard, verdict = spike_guard_lib.judge(spike_guard, guard, metrics["loss"], grad_norm, finite,
                                                    state.step)
      metrics.update(verdict)
      # A skipped step still counts: the state's step is the loop's, and the optimizer's counts (its schedule's,
      # Adam's) keep pace, so the learning rate applied at each step is the one logged and the schedule ends on time.
      kept = state.replace(step=state.step + 1, opt_state=_with_counts(opt_state, state.opt_state))
    new_state = state.replace(step=state.step + 1, params=optax.apply_updates(state.params, updates),
                              opt_state=opt_state)
    new_state = jax.tree.map(lambda new, old: jnp.where(apply, new, old), new_state, kept)
    return (new_state, metrics) if guard is None else (new_state, metrics, guard)

  return train_step


def _with_counts(new_opt_state, old_opt_state):
  """`old_opt_state` with the step counts (the fields optax names 'count') of `new_opt_state`."""
  return jax.tree_util.tree_map_with_path(
      lambda path, new, old: new if getattr(path[-1], "name", None) == "count" else old, new_opt_state, old_opt_state)


def make_eval_step(family, model, loss_cfg, bytes_per_id=None):
  """(params, batch) -> the family's loss sums of the batch (family.eval_metrics turns their totals to metrics).
  With `bytes_per_id` (pretrain.vocab.pipeline.bytes_per_id), also 'bytes': the UTF-8 bytes of the loss-bearing
  target tokens, for bits per byte."""
  def eval_step(params, batch):
    sums = family.loss_sums(model, params, batch, loss_cfg)
    if bytes_per_id is not None:
      targets_BL, weights_BL = family.targets_and_weights(batch)
      sums["bytes"] = jnp.sum(jnp.asarray(bytes_per_id)[targets_BL] * weights_BL)
    return sums
  return eval_step
