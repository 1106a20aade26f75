"""Pipeline parallelism (pretrain/models/pipeline.py): its schedules, GPipe's and circular ones, apply every
layer to every row in order; a pipelined run (pretrain train with a stage axis, on 8 fake CPU devices in a process
of its own, its rows split over a context axis too) resumes from a checkpoint bit for bit, and its checkpoints,
which depend on neither the stage count nor the context split, resume on one device to the same losses up to the
order of the sums. (That a pipeline gives one device's losses and gradients under 2 and 4 stages, and what it
refuses: tests/parallel/test_mesh_layouts.py; that a killed run resumes bit for bit: tests/train/test_train.py.)"""

import shutil

import jax
import jax.numpy as jnp
import pytest

from pretrain.models import pipeline
from tests import numerics
from tests.conftest import fake_devices, tiny_config, train_losses

# Four scanned layers, 16 rows a step in 4 microbatches; a checkpoint every 2 steps, all three kept.
PIPELINED = ("--config.model.num_layers=4", "--config.model.scan_layers=True", "--config.train.batch_size=16",
             "--config.train.microbatches=4", "--config.train.steps=6", "--config.train.checkpoint_every=2",
             "--config.train.keep_checkpoints=3", "--config.train.eval_every=6")
# Saved under 4 stages, each row split in two over the context axis; resumed so, and on one device.
STAGES = {4: ("--config.mesh.stage=4", "--config.mesh.context=2", "--config.mesh.data=1"),
          1: ("--config.mesh.stage=1", "--config.mesh.data=-1")}


def _layer(w_DD, x_BLD, rows_B):
  """A toy layer whose result depends on its order among the others and on the row's own value."""
  return jnp.tanh(x_BLD @ w_DD + rows_B[:, None, None])


@pytest.mark.parametrize("stages,repeats,microbatches,rows", [(4, 1, 4, 8), (4, 1, 8, 8), (2, 3, 4, 8),
                                                              (4, 2, 4, 12), (4, 2, 8, 6), (3, 2, 1, 5)])
def test_a_schedule_applies_every_layer_to_every_row_in_order(stages, repeats, microbatches, rows):
  """Including fewer microbatches than stages (an evaluation batch that the microbatches do not divide: 6 rows
  in 2, 5 rows in 1), where the circular schedule's microbatches wait for the stages to drain."""
  layers, width = stages * repeats * 2, 4
  w_LDD = jax.random.normal(jax.random.key(0), (layers, width, width)) / 2
  x_BLD = jax.random.normal(jax.random.key(1), (rows, 3, width))
  rows_B = jnp.arange(rows, dtype=jnp.float32) / rows  # A per-row input, as the mask and positions are.
  expected, sums = x_BLD, []
  for w_DD in w_LDD:
    expected = _layer(w_DD, expected, rows_B)
    sums.append(jnp.sum(expected))

  def apply(chunk, x_BLD, rows_B, key):  # Each layer also sows its output's sum (as a mixture its terms).
    del key
    def layer(x, w):
      x = _layer(w, x, rows_B)
      return x, jnp.sum(x)
    x_BLD, sums_L = jax.lax.scan(layer, x_BLD, chunk)
    return x_BLD, {"sum": sums_L}
  schedule = pipeline.Schedule(stages, microbatches, repeats)
  got, sown = jax.jit(lambda w, x, r: pipeline.run(schedule, apply, w, x, r))(w_LDD, x_BLD, rows_B)
  numerics.assert_close(got, expected, terms=layers * width)
  # What each layer sowed, its mean over the microbatches: the idling stages' iterations on padding left out.
  count = jnp.gcd(rows, microbatches)
  numerics.assert_close(sown["sum"] * count, jnp.stack(sums), terms=layers * width * rows)


def test_the_stages_are_traced_once_whatever_the_iterations():
  """The iterations are one scan: a step's trace (and compile time) does not grow with microbatches x stages."""
  traced = []

  def apply(chunk, x_BLD, key):
    del key
    traced.append(chunk.shape)
    return jnp.tanh(x_BLD @ chunk[0]), {}
  for microbatches in (2, 16):
    traced.clear()
    schedule = pipeline.Schedule(4, microbatches, repeats=2)
    jax.make_jaxpr(lambda w, x, s=schedule: pipeline.run(s, apply, w, x))(jnp.ones((8, 4, 4)), jnp.ones((16, 3, 4)))
    assert len(traced) <= 2, (microbatches, len(traced))  # The scan's body, and its sown values' shapes.


def test_the_bubble_of_each_schedule():
  assert pipeline.Schedule(4, 4).bubble == pytest.approx(3 / 7)  # GPipe: (S - 1) / (M + S - 1)
  assert pipeline.Schedule(4, 8, repeats=2).bubble == pytest.approx(3 / 19)  # (S - 1) / (R M + S - 1)
  assert pipeline.Schedule(4, 2, repeats=2).bubble == pytest.approx(1 - 4 / 9)  # Waits: R M busy of S + M + S - 1


def _train(run_train, workdir, *args) -> str:
  """`pretrain train` in a process of its own (the test's environment: 8 devices); its output."""
  process = run_train(workdir, *PIPELINED, *args, start_new_session=True)
  out, err = process.communicate(timeout=600)
  assert process.returncode == 0, err[-3000:]
  return out + err


@pytest.mark.slow
def test_a_pipelined_run_resumes_exactly_and_its_checkpoints_resume_on_one_device(tmp_path, run_train, monkeypatch):
  # This process's backend starts now, with its one device, for the one-device run below: started after the
  # setenv (this test alone in a process), it would read XLA_FLAGS and hold 8.
  jax.devices()
  monkeypatch.setenv("XLA_FLAGS", fake_devices(8)["XLA_FLAGS"])
  straight = tmp_path / "straight"
  out = _train(run_train, straight, *STAGES[4])
  assert "Pipeline: 4 stages (mesh.stage) x 4 microbatches (train.microbatches), GPipe's schedule: each stage " \
         "idles 43% of a step" in out
  expected = train_losses(straight)
  for stages in STAGES:  # The run as it stood at its checkpoint of step 2.
    shutil.copytree(straight, tmp_path / f"resumed_{stages}")
    for step in (4, 6):
      shutil.rmtree(tmp_path / f"resumed_{stages}" / "checkpoints" / str(step))
  assert "Resuming from the checkpoint at step 2" in _train(run_train, tmp_path / "resumed_4", *STAGES[4])
  resumed = train_losses(tmp_path / "resumed_4")
  assert [resumed[s] for s in range(3, 7)] == [expected[s] for s in range(3, 7)]
  # On one device, in this process (a Python, TensorFlow and JAX start-up less), its gradients accumulated over the
  # same 4 microbatches.
  result = run_train(tmp_path / "resumed_1", *PIPELINED, *STAGES[1])
  assert result.returncode == 0, result.stderr[-3000:]
  assert "Resuming from the checkpoint at step 2" in result.stdout + result.stderr
  assert "Pipeline:" not in result.stdout + result.stderr
  cfg = tiny_config(*PIPELINED)
  terms = 6 * numerics.gradient_terms(cfg.model, 16, cfg.data.seq_len)
  losses = train_losses(tmp_path / "resumed_1")
  numerics.assert_close([losses[s] for s in range(3, 7)], [expected[s] for s in range(3, 7)], terms=terms,
                        err_msg="resumed on one device")
