"""Real multi-process runs: processes of 4 CPU devices each joined by
jax.distributed (coordinator on 127.0.0.1, collectives over gloo) train
exactly as one process with all the devices, and checkpoints move between
process counts and meshes."""

import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO, TINY, fake_devices, train_losses

# Every test here trains, starts processes or compiles a model of each kind.
pytestmark = pytest.mark.slow

ARGS = [*TINY, "--config.train.batch_size=8", "--config.data.host_sharding=examples", "--config.train.eval_every=2",
        "--config.train.checkpoint_every=100"]


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _train(workdir, cache_dir, processes: int, devices: int, *args):
  """Runs `python -m pretrain train` as `processes` processes of `devices` CPU devices each."""
  env = {**fake_devices(devices), "PRETRAIN_CACHE": cache_dir}
  cmd = [sys.executable, "-m", "pretrain", "train", "--config=configs/quickstart.py", f"--workdir={workdir}", *ARGS,
         *args]
  if processes > 1:
    port = _free_port()
    cmd += [f"--coordinator_address=127.0.0.1:{port}", f"--num_processes={processes}"]
  running = [subprocess.Popen(cmd + ([f"--process_id={i}"] if processes > 1 else []), cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(processes)]
  outputs = [p.communicate(timeout=600) for p in running]
  for p, (out, err) in zip(running, outputs):
    assert p.returncode == 0, err[-3000:]
  return outputs[0][0] + outputs[0][1]




def test_two_processes_match_one_and_checkpoints_move_between_them(tmp_path, cache_dir, vocabulary):
  """data.streams=2: each of two processes prepares only the stream of its half of each batch, and the run is
  the one process's (which prepares both); checkpoints resume on the other process count and mesh."""
  del vocabulary  # Built first, so every process finds it cached.
  one = tmp_path / "one"
  _train(one, cache_dir, 1, 8, "--config.train.steps=6", "--config.data.streams=2")
  expected = train_losses(one, with_eval=True)

  two = tmp_path / "two"
  _train(two, cache_dir, 2, 4, "--config.train.steps=2", "--config.data.streams=2")
  np.testing.assert_allclose([train_losses(two, with_eval=True)[s] for s in (0, 1, 2)], [expected[s] for s in (0, 1, 2)], rtol=1e-5)
  from pretrain.train import checkpoint  # pylint: disable=g-import-not-at-top
  position = checkpoint.Checkpointer(str(two / "checkpoints"), keep=2).restore_data(2)
  assert [s["rows"] for s in position["streams"]] == [8, 8]  # Gathered from both processes.
  # Written by two processes, restored by one with another mesh ...
  out = _train(two, cache_dir, 1, 8, "--config.train.steps=4", "--config.data.streams=2", "--config.mesh.data=1",
               "--config.mesh.fsdp=8")
  assert "Resuming from the checkpoint at step 2" in out
  # ... and the reverse, ending with a sample decoded from parameters sharded over both processes.
  out = _train(two, cache_dir, 2, 4, "--config.train.steps=6", "--config.data.streams=2", "--config.mesh.data=2",
               "--config.mesh.fsdp=2", "--config.mesh.tensor=2", "--config.sample.num=1")
  assert "Resuming from the checkpoint at step 4" in out and "\n>>> " in out
  resumed = train_losses(two, with_eval=True)
  np.testing.assert_allclose([resumed[s] for s in range(7)], [expected[s] for s in range(7)], rtol=1e-5)


def test_replay_with_two_processes_reading_their_own_shards(tmp_path, cache_dir, vocabulary):
  """data.pipeline=replay with data.host_sharding=source: each process reads its shard of the documents."""
  del vocabulary
  workdir = tmp_path / "source"
  replay = ("--config.data.pipeline=replay", "--config.data.host_sharding=source")
  _train(workdir, cache_dir, 2, 4, "--config.train.steps=2", *replay)
  from pretrain.train import checkpoint  # pylint: disable=g-import-not-at-top
  position = checkpoint.Checkpointer(str(workdir / "checkpoints"), keep=2).restore_data(2)
  assert position == {"task": "corpus_clm", "examples": 16, "batch_size": 8, "processes": 2}
  assert all(np.isfinite(loss) for loss in train_losses(workdir, with_eval=True).values())
  out = _train(workdir, cache_dir, 1, 8, "--config.train.steps=3", *replay)
  assert "Resuming from the checkpoint at step 2" in out and "each host's order of examples changes" in out


def test_incomplete_process_flags_are_refused(tmp_path, cache_dir):
  result = subprocess.run([sys.executable, "-m", "pretrain", "train", f"--workdir={tmp_path}", "--num_processes=2"],
                          cwd=REPO, capture_output=True, text=True, env={**os.environ, "PRETRAIN_CACHE": cache_dir})
  assert result.returncode == 2
  assert "--coordinator_address, --process_id missing" in result.stderr


def test_cluster_detection(monkeypatch):
  from pretrain.parallel import distributed  # pylint: disable=g-import-not-at-top
  for name in ("SLURM_NTASKS", "SLURM_PROCID", "TPU_WORKER_HOSTNAMES"):
    monkeypatch.delenv(name, raising=False)
  assert not distributed._on_cluster()  # pylint: disable=protected-access
  monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "t1k-0")  # One host: nothing to join.
  assert not distributed._on_cluster()  # pylint: disable=protected-access
  monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "t1k-0,t1k-1")
  assert distributed._on_cluster()  # pylint: disable=protected-access
  monkeypatch.delenv("TPU_WORKER_HOSTNAMES")
  monkeypatch.setenv("SLURM_NTASKS", "4")
  monkeypatch.setenv("SLURM_PROCID", "2")
  assert distributed._on_cluster()  # pylint: disable=protected-access


def test_processes_that_check_one_workdir_at_once_do_not_fail_each_other(tmp_path):
  """Every process of a multi-process run checks the shared workdir at start. A shared probe file was removed
  under another process's check, which then failed as 'cannot be written' (and the others waited for it)."""
  import concurrent.futures  # pylint: disable=g-import-not-at-top
  from pretrain import workdir  # pylint: disable=g-import-not-at-top

  def check_many(_):
    for _ in range(300):
      workdir.check_writable(str(tmp_path))
  with concurrent.futures.ThreadPoolExecutor(4) as pool:
    list(pool.map(check_many, range(4)))
  assert not list(tmp_path.iterdir())
