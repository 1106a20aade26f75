"""A pipelined run (pretrain train with a stage axis, on 8 fake CPU devices in processes of their own) SIGKILLed
after a checkpoint resumes bit for bit; its checkpoints do not depend on the stage count, so they resume under 2
stages, or on one device, to the same losses up to the order of the sums. (That a pipeline gives one device's
losses and gradients, and what it refuses: tests/test_mesh_layouts.py.)"""

import shutil

from tests import numerics
from tests.conftest import fake_devices, kill_after_checkpoint, tiny_config, train_losses

# Four scanned layers, 16 rows a step in 4 microbatches; a checkpoint every 2 steps.
PIPELINED = ("--config.model.num_layers=4", "--config.model.scan_layers=True", "--config.train.batch_size=16",
             "--config.train.microbatches=4", "--config.train.steps=6", "--config.train.checkpoint_every=2",
             "--config.train.eval_every=6")
STAGES = {4: ("--config.mesh.stage=4", "--config.mesh.data=2"), 2: ("--config.mesh.stage=2", "--config.mesh.data=4"),
          1: ("--config.mesh.stage=1", "--config.mesh.data=-1")}


def _train(run_train, workdir, *args) -> str:
  """`pretrain train` in a process of its own (the test's environment: 8 devices); its output."""
  process = run_train(workdir, *PIPELINED, *args, start_new_session=True)
  out, err = process.communicate(timeout=600)
  assert process.returncode == 0, err[-3000:]
  return out + err


def test_a_killed_pipelined_run_resumes_exactly_under_any_stage_count(tmp_path, run_train, monkeypatch):
  monkeypatch.setenv("XLA_FLAGS", fake_devices(8)["XLA_FLAGS"])
  out = _train(run_train, tmp_path / "straight", *STAGES[4])
  assert "Pipeline: 4 stages (mesh.stage) x 4 microbatches (train.microbatches), GPipe's schedule: each stage " \
         "idles 43% of a step" in out
  expected = train_losses(tmp_path / "straight")
  killed = tmp_path / "killed"
  kill_after_checkpoint(run_train, killed, *PIPELINED, *STAGES[4], step=2)
  for stages in (2, 1):
    shutil.copytree(killed, tmp_path / f"resumed_{stages}")
  assert "Resuming from the checkpoint at step 2" in _train(run_train, killed, *STAGES[4])
  resumed = train_losses(killed)
  assert [resumed[s] for s in range(3, 7)] == [expected[s] for s in range(3, 7)]
  # Under 2 stages x 4 data shards, and on one device (gradients accumulated over the same 4 microbatches).
  cfg = tiny_config(*PIPELINED)
  terms = 6 * numerics.gradient_terms(cfg.model, 16, cfg.data.seq_len)
  for stages in (2, 1):
    if stages == 1:
      monkeypatch.setenv("XLA_FLAGS", fake_devices(1)["XLA_FLAGS"])
    workdir = tmp_path / f"resumed_{stages}"
    out = _train(run_train, workdir, *STAGES[stages])
    assert "Resuming from the checkpoint at step 2" in out and ("Pipeline: 2 stages" in out) == (stages == 2)
    losses = train_losses(workdir)
    numerics.assert_close([losses[s] for s in range(3, 7)], [expected[s] for s in range(3, 7)], terms=terms,
                          err_msg=f"resumed under {stages} stage(s)")
