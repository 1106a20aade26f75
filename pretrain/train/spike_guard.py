"""The loss-spike guard (train.spike_guard): a step whose loss or gradient norm spikes is not applied, and repeated
spikes roll the run back to a checkpoint from before them, past the data that caused them.

A spike is a value more than train.spike_threshold running deviations above the running mean of the applied
steps' values (exponential averages over about train.spike_window steps; a deviation counts as at least 1% of the
mean, so a flat curve does not make noise a spike). The guard judges once spike_window steps were applied. A loss or
gradient that is not finite is a spike of the loss.

The run rolls back when train.spike_rollback_after steps in a row spiked, or at once when the loss spikes right
after an applied step (that step's update may be the harm, which skipping this one cannot undo). It goes back to
the newest checkpoint from before the harm, deletes the newer ones, and reads on from where the data stream stands:
the batches of the bad window are skipped and the rest of the data order is unchanged (the stream is addressed by
index). The learning rate can be lowered for a while after (train.spike_lr_factor for train.spike_lr_steps).

The guard's statistics are arrays that the step carries, so it decides before applying without waiting for the
host; a checkpoint stores them with the rollbacks so far, so a resumed run judges and rolls back as the straight
run does.
"""

import jax
import jax.numpy as jnp
import numpy as np

from pretrain.system.console import log
from pretrain.system.errors import UserError

# The guard's arrays (scalars): applied steps seen; running mean and variance of the loss and of the gradient norm;
# spiked steps in a row; the newest step known good before them; data batches skipped by rollbacks (so a step's
# batch is its step plus these); the step until which the learning rate is lowered.
_INTS = ("count", "in_a_row", "clean", "skipped", "lr_until")
_FLOATS = ("loss_mean", "loss_var", "grad_mean", "grad_var")
# What a step's metrics carry of the guard's verdict, for the host (not logged as such).
VERDICT = ("spike", "loss_spike", "rollback", "clean", *_FLOATS)
POISON = 100.0  # train.spike_test_batches multiply their loss (and its gradient) by this.


def initial() -> dict:
  return {**{k: np.int32(0) for k in _INTS}, **{k: np.float32(0) for k in _FLOATS}}


def poisoned(c, guard, step, grads, sums):
  """The test hook: the loss and gradient of the data batches train.spike_test_batches, times POISON."""
  if not c.spike_test_batches:
    return grads, sums
  factor = jnp.where(jnp.isin(step + guard["skipped"], jnp.asarray(c.spike_test_batches)), POISON, 1.0)
  return jax.tree.map(lambda g: g * factor.astype(g.dtype), grads), {**sums, "loss": sums["loss"] * factor}


def slowed(c, guard, step, updates):
  """The updates with the learning rate lowered after a rollback (train.spike_lr_factor), and that factor."""
  if c.spike_lr_factor == 1:
    return updates, jnp.float32(1)
  factor = jnp.where(step < guard["lr_until"], jnp.float32(c.spike_lr_factor), jnp.float32(1))
  return jax.tree.map(lambda u: u * factor.astype(u.dtype), updates), factor


def judge(c, guard, loss, grad_norm, finite, step):
  """(apply, the guard's arrays after this step, what the host reads: spike, rollback and the statistics)."""
  ready = guard["count"] >= c.spike_window

  def above(x, name):
    mean, var = guard[f"{name}_mean"], guard[f"{name}_var"]
    return ready & (x > mean + c.spike_threshold * jnp.maximum(jnp.sqrt(var), 0.01 * jnp.abs(mean)))

  loss_spike = ~finite | above(loss, "loss")
  grad_spike = finite & above(grad_norm, "grad")
  spike = loss_spike | grad_spike
  first = guard["in_a_row"] == 0
  in_a_row = jnp.where(spike, guard["in_a_row"] + 1, 0)
  rollback = spike & ((in_a_row >= c.spike_rollback_after) | (loss_spike & first))
  new = {**guard, "in_a_row": in_a_row, "count": guard["count"] + (~spike).astype(jnp.int32),
         # The state before a first spike is good, or before the last update too when the loss spiked.
         "clean": jnp.where(spike & first, step - loss_spike.astype(step.dtype), guard["clean"])}
  alpha = 1.0 / jnp.minimum(jnp.maximum(new["count"], 1), c.spike_window).astype(jnp.float32)
  for name, x in (("loss", loss), ("grad", grad_norm)):
    mean, var = guard[f"{name}_mean"], guard[f"{name}_var"]
    delta = jnp.where(spike, 0.0, x - mean)  # A spiked step leaves the statistics as they were.
    new[f"{name}_mean"] = mean + alpha * delta
    new[f"{name}_var"] = jnp.where(spike, var, (1 - alpha) * (var + alpha * delta * delta))
  verdict = dict(zip(VERDICT, (spike, loss_spike, rollback, new["clean"], *(guard[k] for k in _FLOATS))))
  return ~spike, new, verdict


class Rollback(Exception):
  """Raised by Guard.settle when step `step` calls for a rollback; the loop catches it and calls Guard.roll_back."""

  def __init__(self, step: int, verdict: dict):
    super().__init__(f"rollback at step {step}")
    self.step, self.verdict = step, verdict


class Guard:
  """The host's side: carries the arrays from step to step, reads each step's verdict, saves the guard with each
  checkpoint, rolls back."""

  def __init__(self, run, ckpt, start: int):
    self.c, self._run, self._ckpt = run.cfg.train, run, ckpt
    saved = ckpt.restore_guard(start) if start else None
    self.rollbacks = list(saved["rollbacks"]) if saved else []
    self.arrays = self._put(saved["arrays"] if saved else initial())
    self._next_batch = start + int(self.arrays["skipped"])  # The data batch (counted from the start) read next.
    self.spikes = 0  # Spiked steps since the last logged step.

  def _put(self, values: dict) -> dict:
    """Replicated arrays of the guard's values (their dtypes: JSON gives Python numbers)."""
    typed = {k: np.int32(values[k]) for k in _INTS} | {k: np.float32(values[k]) for k in _FLOATS}
    return jax.device_put(typed, self._run.replicated)

  def step(self, state, batch):
    """The guarded train step (Run.guarded_step); the same (state, metrics) as Run.train_step."""
    state, metrics, self.arrays = self._run.guarded_step(state, batch, self.arrays)
    self._next_batch += 1
    return state, metrics

  def settle(self, unchecked, *_):
    """Reads the verdict of the step `unchecked` names, (step, its metrics), if any: logs a spike, raises Rollback
    when it calls for one. Returns None: nothing is left unchecked."""
    if unchecked is None:
      return None
    step, metrics = unchecked
    if not bool(metrics["spike"]):
      return None
    verdict = jax.device_get({k: metrics[k] for k in ("loss", "grad_norm", *VERDICT)})
    self.spikes += 1
    what = (f"the loss spiked ({verdict['loss']:.4g}; running mean {verdict['loss_mean']:.4g}, deviation "
            f"{np.sqrt(verdict['loss_var']):.3g})" if verdict["loss_spike"] else
            f"the gradient norm spiked ({verdict['grad_norm']:.4g}; running mean {verdict['grad_mean']:.4g}, "
            f"deviation {np.sqrt(verdict['grad_var']):.3g})")
    if not verdict["rollback"]:
      log(f"Step {step}: {what}; the step is not applied (train.spike_guard)")
      return None
    log(f"Step {step}: {what}")
    raise Rollback(step, verdict)

  def take_spikes(self) -> int:
    spikes, self.spikes = self.spikes, 0
    return spikes

  def saved(self) -> dict:
    """What a checkpoint stores of the guard (after the step it saves)."""
    return {"arrays": {k: v.item() for k, v in jax.device_get(self.arrays).items()}, "rollbacks": self.rollbacks}

  def roll_back(self, back: Rollback, initial_state):
    """Goes back to the newest checkpoint at or before the verdict's good step (none: `initial_state()`, if the
    run never had one there), deleting newer ones, and returns (state, step): training goes on from there with the
    batches read since skipped."""
    c, ckpt = self.c, self._ckpt
    ckpt.wait()
    clean = int(back.verdict["clean"])
    kept = sorted(ckpt.manager.all_steps())
    to = max((s for s in kept if s <= clean), default=0)
    if not to and clean >= c.checkpoint_every:
      raise UserError(f"step {back.step} calls for a rollback (train.spike_guard) to a checkpoint at or before step "
                      f"{clean}, and the oldest kept is of step {kept[0] if kept else None}",
                      fix="raise train.keep_checkpoints (or lower train.checkpoint_every), then rerun to resume")
    if len(self.rollbacks) >= c.spike_max_rollbacks:
      done = ", ".join(f"{r['step']} to {r['to']}" for r in self.rollbacks) or "none"
      raise UserError(f"the loss-spike guard keeps firing: step {back.step} calls for rollback "
                      f"{len(self.rollbacks) + 1}, beyond train.spike_max_rollbacks={c.spike_max_rollbacks} (rolled "
                      f"back so far: {done}); nothing was deleted",
                      fix="lower optimizer.learning_rate or look at the data of these steps, or raise "
                      "train.spike_max_rollbacks, then rerun to resume")
    ckpt.delete_after(to)  # Before anything else: a run killed from here on resumes from `to` and rolls back again.
    if to:
      state = self._run.restore(ckpt, to, f"the checkpoint of step {to}")
      saved = ckpt.restore_guard(to)
    else:
      state, saved = initial_state(), None
    arrays = dict(saved["arrays"]) if saved else initial()
    first_skipped = to + int(arrays["skipped"])
    arrays.update(in_a_row=0, skipped=self._next_batch - to, lr_until=to + c.spike_lr_steps)
    self.arrays = self._put(arrays)
    self.rollbacks.append({"step": back.step, "to": to, "batches": [first_skipped, self._next_batch - 1]})
    slower = (f"; learning rate x{c.spike_lr_factor:g} for {c.spike_lr_steps} steps"
              if c.spike_lr_factor != 1 and c.spike_lr_steps else "")
    log(f"Rolled back to {f'the checkpoint of step {to}' if to else 'the initial state'} and skipped data batches "
        f"{first_skipped}-{self._next_batch - 1} ({self._next_batch - first_skipped} batches){slower}: rollback "
        f"{len(self.rollbacks)} of at most {c.spike_max_rollbacks} (train.spike_max_rollbacks)")
    return state, to
