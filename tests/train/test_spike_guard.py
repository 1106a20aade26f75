"""The loss-spike guard's verdicts (pretrain/train/spike_guard.py), step by step; a run that rolls back, and its
resumes, are in tests/train/test_train.py."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pretrain.train import spike_guard
from tests.conftest import tiny_run

CFG = types.SimpleNamespace(spike_window=4, spike_threshold=6.0, spike_rollback_after=2)


def _verdicts(values):
  """The guard's verdict of each (loss, gradient norm) in turn, from its initial arrays."""
  guard, verdicts = {k: jnp.asarray(v) for k, v in spike_guard.initial().items()}, []
  for step, (loss, grad) in enumerate(values):
    loss, grad = jnp.float32(loss), jnp.float32(grad)
    apply, guard, verdict = spike_guard.judge(CFG, guard, loss, grad, jnp.isfinite(loss) & jnp.isfinite(grad),
                                              jnp.int32(step))
    verdicts.append({"apply": bool(apply), **{k: np.asarray(v).item() for k, v in verdict.items()}})
  return verdicts, guard


def test_spikes_are_judged_against_the_applied_steps():
  normal = [(5.0 + 0.1 * (i % 2), 1.0 + 0.05 * (i % 3)) for i in range(4)]
  verdicts, guard = _verdicts([*normal, (50.0, 1.0), (5.0, 1.0), (5.0, 9.0), (5.0, 1.0), (5.0, 9.0), (5.0, 9.0),
                               (float("nan"), 1.0)])
  # Not judged before spike_window applied steps: 50x the loss would pass at step 0.
  assert [v["spike"] for v in verdicts[:4]] == [False] * 4
  loss_spike, after, grad_spike, _, first, second, not_finite = verdicts[4:]
  # A loss spike right after an applied step rolls back at once, to before that step's update.
  assert loss_spike["spike"] and loss_spike["loss_spike"] and loss_spike["rollback"] and not loss_spike["apply"]
  assert loss_spike["clean"] == 3
  assert after["apply"] and not after["spike"]
  # A gradient spike is skipped; spike_rollback_after of them in a row roll back, to before the first.
  assert grad_spike["spike"] and not grad_spike["loss_spike"] and not grad_spike["rollback"]
  assert first["spike"] and not first["rollback"] and second["rollback"] and second["clean"] == 8
  assert not_finite["loss_spike"] and not not_finite["apply"]
  # The statistics are of the six applied steps only.
  applied = [loss for (loss, _), v in zip([*normal, (50, 1), (5, 1), (5, 9), (5, 1)], verdicts) if v["apply"]]
  assert int(guard["count"]) == len(applied) == 6
  assert 4.9 < float(guard["loss_mean"]) < 5.1


def test_a_flat_curve_does_not_make_noise_a_spike():
  """A deviation counts as at least 1% of the mean: 6 x 1% above a perfectly flat loss is not yet a spike."""
  assert [_verdicts([(5.0, 1.0)] * 4 + [(loss, 1.0)])[0][-1]["spike"] for loss in (5.29, 5.31)] == [False, True]


@pytest.mark.slow
def test_a_skipped_step_advances_the_optimizer_s_counts_with_the_step():
  """The schedule follows the step: after a skipped spike, the learning rate applied is the step's, as logged."""
  run = tiny_run("--config.train.spike_guard=True", "--config.train.spike_window=2",
                 "--config.train.spike_test_batches=(2,)")
  state, guard, batch = run.create_state(), {k: jnp.asarray(v) for k, v in spike_guard.initial().items()}, \
      run.random_batch()
  for _ in range(3):
    state, metrics, guard = run.guarded_step(state, batch, guard)
  assert bool(metrics["spike"]) and int(state.step) == 3
  counts = [int(leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(state.opt_state)
            if getattr(path[-1], "name", None) == "count"]
  assert counts and set(counts) == {3}
