"""Cooldown branches (`pretrain cooldown`) of a wsd run.

The parent trains 18 steps, stable from step 2 to 10, then decays over its last 8, and keeps its checkpoints of
steps 6 and 10. Its branch from step 10 that decays over 8 steps is the same run: the branch must reproduce the
parent's own decay bit for bit (its parameters, optimizer state and data stream at step 10 carried over), also when
it is killed and resumed. The branch's rates are of its own schedule (tests/train/test_wsd.py has their values).
"""

import json
import os
import subprocess
import sys

import pytest

from pretrain.commands import cooldown
from pretrain.system.errors import UserError
from pretrain.train import checkpoint
from pretrain.workdir import branch as branch_lib
from tests.conftest import REPO, kill_after_checkpoint, train_losses

PARENT = ("--config.optimizer.schedule=wsd", "--config.optimizer.warmup_steps=2", "--config.train.steps=18",
          "--config.optimizer.decay_steps=8", "--config.train.checkpoint_every=4", "--config.train.eval_every=100",
          "--config.train.keep_steps=(6, 10)")
BRANCH = ("--from_step=10", "--steps=8")


def _start(cache_dir, *args, **popen) -> subprocess.Popen:
  """`python -m pretrain ARGS` with the tests' data cache, started with Popen's `popen`."""
  return subprocess.Popen([sys.executable, "-m", "pretrain", *args], cwd=REPO,
                          env={**os.environ, "PRETRAIN_CACHE": cache_dir}, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, **popen)


@pytest.fixture(scope="module")
def parent(run_train, tmp_path_factory):
  workdir = tmp_path_factory.mktemp("cooldown") / "parent"
  result = run_train(workdir, *PARENT)
  assert result.returncode == 0, result.stderr
  return workdir


@pytest.fixture(scope="module")
def branch(parent, cache_dir, run_pretrain, tmp_path_factory):
  """The branch's workdir: `pretrain cooldown` killed after the branch's checkpoint of step 12, then resumed by
  `pretrain train --workdir` alone."""
  workdir = tmp_path_factory.mktemp("cooldown") / "branch"
  start = lambda out, *args, **popen: _start(cache_dir, "cooldown", f"--workdir={parent}", *BRANCH,
                                             f"--out={out}", *args, **popen)
  kill_after_checkpoint(start, workdir, step=12)
  resumed = run_pretrain("train", f"--workdir={workdir}")  # In this process: only the killed one needs its own.
  assert resumed.returncode == 0, resumed.stderr
  assert f"Resuming from the checkpoint at step 12 in {workdir}/checkpoints" in resumed.stdout + resumed.stderr
  return workdir


@pytest.mark.slow
def test_a_branch_continues_its_parent_and_resumes_bit_identically_after_a_kill(parent, branch):
  """Step 11's loss is of the parent's parameters of step 10 on the parent's 11th batch; every later one equal
  too, across the branch's SIGKILL after step 12, and the data position at the end is the parent's."""
  losses, parents = train_losses(branch), train_losses(parent)
  assert sorted(losses) == list(range(11, 19)) and losses == {s: parents[s] for s in range(11, 19)}
  positions = [checkpoint.Checkpointer(str(w / "checkpoints"), keep=2).restore_data(18) for w in (branch, parent)]
  assert positions[0] == positions[1] and positions[0]["streams"][0]["rows"] == 18 * 4
  saved = json.loads((branch / "config.json").read_text())
  assert (saved["train"]["parent"], saved["train"]["parent_step"]) == (str(parent), 10)
  assert (saved["train"]["steps"], saved["optimizer"]["decay_steps"], saved["train"]["keep_steps"]) == (18, 8, [])
  assert branch_lib.existing(str(branch), str(parent), 10, 8).to_dict() == saved  # The same command resumes it.
  # The parent kept its newest two checkpoints and train.keep_steps' (4, 8 and 12 were deleted).
  assert sorted(checkpoint.Checkpointer(str(parent / "checkpoints"), keep=2).manager.all_steps()) == [6, 10, 16, 18]


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["--from_step=8", "--steps=4"], "has no checkpoint of step 8; it keeps steps 6, 10, 16, 18; branch from one of "
                                     "those (a run keeps its branch points when trained with "
                                     "--config.train.keep_steps=(S1, S2, ...))"),
    (["--from_step=16", "--steps=4"], "step 16 of '{parent}' is past the start of its decay (step 10); branch from "
                                      "its stable phase, steps 2 to 10"),
    (["--from_step=1", "--steps=4"], "step 1 of '{parent}' is in its warm-up (optimizer.warmup_steps=2)"),
    (["--from_step=10", "--steps=0"], "argument --steps: give at least 1, not 0"),
    (["--from_step=6", "--steps=4", "--out={branch}"],
     "--out='{branch}' already holds the branch of '{parent}' from step 10 to 18; choose another --out"),
    (["--from_step=6", "--steps=4", "--out={other}"], "--out='{other}' already holds a run of its own"),
    (["--from_step=6", "--steps=4", "--out={parent}"], "is the parent's workdir"),
    (["--from_step=6", "--steps=4", "--out={parent}/checkpoints/6"], "is inside the parent's workdir"),
    (["--from_step=6", "--steps=4", "--out={parent}/checkpoints"], "is inside the parent's workdir"),
    (["--from_step=6", "--steps=4", "--config.train.steps=30"], "--config.train.steps is set by the branch"),
    # An override of the parent's shapes: its checkpoint would not restore (and a checkpoints folder was left).
    (["--from_step=6", "--steps=4", "--config.model.mlp_dim=128"],
     "holds checkpoints of a run with model.mlp_dim=64, not 128; a branch continues its parent's parameters and "
     "optimizer state: drop that override"),
])
def test_a_branch_that_cannot_be_made_is_refused_in_one_line(parent, branch, tmp_path, args, message):
  """Before anything is written; a run of its own in --out is refused too (here a config.json alone)."""
  paths = {"parent": parent, "branch": branch, "other": tmp_path / "other"}
  (tmp_path / "other").mkdir()
  (tmp_path / "other" / "config.json").write_bytes((parent / "config.json").read_bytes())
  args = [a.format(**paths) for a in args]
  out = [] if any(a.startswith("--out") for a in args) else [f"--out={tmp_path / 'new'}"]
  with pytest.raises(UserError) as raised:
    cooldown.main.__wrapped__([f"--workdir={parent}", *args, *out])
  assert message.format(**paths) in str(raised.value) and "\n" not in str(raised.value)
  assert not (tmp_path / "new").exists() and os.listdir(tmp_path / "other") == ["config.json"]


@pytest.mark.slow
def test_a_branch_reached_by_pretrain_train_has_cooldown_s_checks(parent, branch, tmp_path):
  """Resuming a branch cannot change its steps or decay; a branch set up through train.parent is checked as
  pretrain cooldown checks one (a parent that is no wsd run, a missing parent, fields cooldown would set)."""
  from pretrain.commands import train as train_command  # pylint: disable=g-import-not-at-top
  for override, message in (("--config.optimizer.decay_steps=1", "optimizer.decay_steps=1 is given on the branch's "
                                                                  "resume, but the branch's is 8"),
                            ("--config.train.steps=30", "train.steps=30 is given on the branch's resume")):
    with pytest.raises(UserError, match=message):
      train_command.main.__wrapped__([f"--workdir={branch}", override])
  cosine = json.loads((parent / "config.json").read_text())
  cosine["optimizer"]["schedule"] = "cosine"
  (tmp_path / "cosine").mkdir()
  (tmp_path / "cosine" / "config.json").write_text(json.dumps(cosine))
  made = lambda parent_dir, *args: train_command.main.__wrapped__(
      [f"--workdir={tmp_path / 'new'}", f"--config.train.parent={parent_dir}", "--config.train.parent_step=10", *args])
  with pytest.raises(UserError, match="trains with optimizer.schedule=cosine: a cooldown branches a wsd run"):
    made(tmp_path / "cosine", "--config.train.steps=18")
  with pytest.raises(UserError):
    made(tmp_path / "missing", "--config.train.steps=18")
  assert not (tmp_path / "missing").exists() and not (tmp_path / "new").exists()
  with pytest.raises(UserError, match="is given with train.parent, but the branch's is"):
    made(parent, "--config.train.steps=18")  # The quickstart's schedule, not the branch's wsd decay of 8.


@pytest.mark.slow
def test_only_a_wsd_run_branches(parent, tmp_path):
  cosine = json.loads((parent / "config.json").read_text())
  cosine["optimizer"]["schedule"] = "cosine"
  (tmp_path / "cosine").mkdir()
  (tmp_path / "cosine" / "config.json").write_text(json.dumps(cosine))
  with pytest.raises(UserError, match="trains with optimizer.schedule=cosine: a cooldown branches a wsd run"):
    cooldown.main.__wrapped__([f"--workdir={tmp_path / 'cosine'}", *BRANCH, f"--out={tmp_path / 'new'}"])
