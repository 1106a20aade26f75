"""A damaged latest checkpoint is found by its checksums, moved aside (never deleted) with a warning, and the
run resumes from the newest intact one with the losses of an uninterrupted run; with none intact, one line."""

import os
import shutil

import numpy as np
import pytest

from tests.conftest import train_losses

ARGS = ["--config.train.steps=4", "--config.train.checkpoint_every=2", "--config.sample.num=0"]




@pytest.fixture(scope="module")
def trained(tmp_path_factory, run_train):
  workdir = tmp_path_factory.mktemp("trained") / "run"
  result = run_train(workdir, *ARGS)
  assert result.returncode == 0, result.stderr
  return workdir


def _largest_file(directory):
  paths = [os.path.join(root, n) for root, _, names in os.walk(directory) for n in names]
  return max(paths, key=os.path.getsize)


def _truncate(step_dir):
  path = _largest_file(os.path.join(step_dir, "state"))
  with open(path, "r+b") as f:
    f.truncate(os.path.getsize(path) // 2)


def _overwrite(step_dir):
  path = _largest_file(os.path.join(step_dir, "state"))
  with open(path, "r+b") as f:
    f.seek(os.path.getsize(path) // 2)
    f.write(np.random.default_rng(0).bytes(64))


def _empty(step_dir):
  shutil.rmtree(step_dir)
  os.mkdir(step_dir)


CORRUPTIONS = {
    "truncated array file": _truncate,
    "missing metadata file": lambda step_dir: os.remove(os.path.join(step_dir, "state", "_METADATA")),
    "empty step directory": _empty,
    "random bytes in a data file": _overwrite,
}


@pytest.mark.slow
@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_every_kind_of_damage_is_found(trained, tmp_path, corruption):
  """The checksums find each damage; a reader passes over the step without moving it."""
  from pretrain.train import checkpoint, checksums  # pylint: disable=g-import-not-at-top
  workdir = tmp_path / "run"
  shutil.copytree(trained, workdir)
  CORRUPTIONS[corruption](str(workdir / "checkpoints" / "4"))
  assert checksums.problem(str(workdir / "checkpoints" / "4"))
  assert not checksums.problem(str(workdir / "checkpoints" / "2"))
  reader = checkpoint.Checkpointer(str(workdir / "checkpoints"), keep=2, move_aside=False)
  assert reader.latest_step() == 2
  reader.close()
  assert sorted(os.listdir(workdir / "checkpoints")) == ["2", "4"]


@pytest.mark.slow
def test_a_damaged_latest_checkpoint_is_moved_aside_and_the_run_resumes(trained, tmp_path, run_train, run_pretrain):
  """Training moves the damaged step aside and resumes from the intact one (one kind of damage: the finding of
  each is tested above). The half-written save of a step killed midway, one its checkpoint_every never saves
  again, is removed as training starts."""
  workdir = tmp_path / "run"
  shutil.copytree(trained, workdir)
  _truncate(str(workdir / "checkpoints" / "4"))
  half_written = workdir / "checkpoints" / "3.orbax-checkpoint-tmp-1796560000000"
  shutil.copytree(workdir / "checkpoints" / "2" / "state", half_written / "state")
  resumed = run_train(workdir, *ARGS)
  assert resumed.returncode == 0, resumed.stderr
  assert not half_written.exists()
  output = resumed.stdout + resumed.stderr
  assert "warning: the checkpoint of step 4" in output and "resuming from step 2" in output
  assert "Traceback" not in output
  aside = [name for name in os.listdir(workdir / "checkpoints") if name.startswith("4.damaged-")]
  assert len(aside) == 1 and f"moved to {workdir / 'checkpoints' / aside[0]}" in output  # Kept, not deleted.
  expected = train_losses(trained)
  assert [train_losses(workdir)[s] for s in (3, 4)] == [expected[s] for s in (3, 4)]  # As the uninterrupted run.


@pytest.mark.slow
def test_no_intact_checkpoint_is_one_line(trained, tmp_path, run_train, run_pretrain):
  workdir = tmp_path / "run"
  shutil.copytree(trained, workdir)
  _truncate(str(workdir / "checkpoints" / "4"))
  _overwrite(str(workdir / "checkpoints" / "2"))
  generated = run_pretrain("generate", f"--workdir={workdir}", "--prompt=The")
  assert generated.returncode == 2
  assert "no intact checkpoint" in generated.stderr.strip().splitlines()[-1]
  assert sorted(os.listdir(workdir / "checkpoints")) == ["2", "4"]  # Commands that only read move nothing.
  result = run_train(workdir, *ARGS, "--config.train.steps=6")
  assert result.returncode == 2 and "Traceback" not in result.stderr
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith("error: no intact checkpoint in") and "step 4 has" in last and "step 2 has" in last
  assert sorted(os.listdir(workdir / "checkpoints")) == ["2", "4"]  # Left for the user to restore.


@pytest.mark.slow
def test_a_step_without_its_orbax_metadata_is_read_around_and_resumed(trained, tmp_path, run_train, run_pretrain):
  """A copy cut short or a sync that skipped a step's _CHECKPOINT_METADATA (where the run's id and config are
  recorded): the readers take the records of the step before, and the run resumes from the step itself."""
  from pretrain.train import checkpoint  # pylint: disable=g-import-not-at-top
  workdir = tmp_path / "run"
  shutil.copytree(trained, workdir)
  recorded = checkpoint.recorded_run(str(workdir / "checkpoints"))
  os.remove(workdir / "checkpoints" / "4" / "_CHECKPOINT_METADATA")
  assert recorded and checkpoint.recorded_run(str(workdir / "checkpoints")) == recorded  # Step 2's record.
  assert checkpoint.recorded_config(str(workdir / "checkpoints"))["train"]["steps"] == 4
  goodput = run_pretrain("goodput", f"--workdir={workdir}")
  assert goodput.returncode == 0 and "Traceback" not in goodput.stderr, goodput.stderr
  resumed = run_train(workdir, *ARGS, "--config.train.steps=5")
  assert resumed.returncode == 0, resumed.stderr
  assert "Resuming from the checkpoint at step 4" in resumed.stdout + resumed.stderr


@pytest.mark.slow
def test_reading_a_run_restores_its_parameters_not_its_optimizer_state(trained, monkeypatch):
  """export, eval, generate and probe read the parameters alone (the optimizer's moments are twice their size):
  equal to a full restore's, and read even where the config's optimizer would have another state."""
  import jax  # pylint: disable=g-import-not-at-top
  from pretrain import run as run_lib  # pylint: disable=g-import-not-at-top
  from pretrain.train import checkpoint  # pylint: disable=g-import-not-at-top
  from tests.conftest import tiny_config  # pylint: disable=g-import-not-at-top
  run = run_lib.Run.build(run_lib.saved_config(str(trained)))
  saver = checkpoint.Checkpointer(str(trained / "checkpoints"), 2, move_aside=False)
  full = run.restore(saver, 4, "the checkpoint").params
  adafactor = run_lib.Run.build(tiny_config(*ARGS, "--config.optimizer.name=adafactor"), vocabulary=run.vocabulary)
  alone = adafactor.restore(saver, 4, "the checkpoint", params_only=True)
  saver.close()
  with monkeypatch.context() as patched:
    patched.setattr(checkpoint.Checkpointer, "restore", lambda *_: pytest.fail("load restored the optimizer state"))
    _, loaded, step = run_lib.load(str(trained))
  assert step == 4
  for params in (alone, loaded):
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(full)))
