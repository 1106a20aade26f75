"""Real multi-process runs: processes of 4 CPU devices each joined by
jax.distributed (coordinator on 127.0.0.1, collectives over gloo) train
as one device does, up to the order of the sums, and checkpoints move
between process counts and meshes."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from tests import numerics
from tests.conftest import REPO, TINY, fake_devices, tiny_run, train_losses

ARGS = [*TINY, "--config.train.batch_size=8", "--config.data.host_sharding=examples", "--config.train.eval_every=2",
        "--config.train.checkpoint_every=100"]


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


# A host slow to exit: os._exit waits, as a loaded host's exit may. Process 0, the coordinator, exiting first
# would then have JAX's coordination service abort the others (unless they leave together).
SLOW_EXIT = "import os, time\n_exit = os._exit\nos._exit = lambda code: (time.sleep(3), _exit(code))\n"


def _start(workdir, cache_dir, processes: int, devices: int, *args, slow_exit: str = "") -> list[subprocess.Popen]:
  """Starts `python -m pretrain train` as `processes` processes of `devices` CPU devices each; with `slow_exit`
  (a directory), all but process 0 exit 3 s late (its sitecustomize.py: SLOW_EXIT)."""
  env = {**fake_devices(devices), "PRETRAIN_CACHE": cache_dir}
  cmd = [sys.executable, "-m", "pretrain", "train", "--config=configs/quickstart.py", f"--workdir={workdir}", *ARGS,
         *args]
  if processes > 1:
    port = _free_port()
    cmd += [f"--coordinator_address=127.0.0.1:{port}", f"--num_processes={processes}"]
  if slow_exit:
    os.makedirs(slow_exit, exist_ok=True)
    with open(os.path.join(slow_exit, "sitecustomize.py"), "w") as f:
      f.write(SLOW_EXIT)
  return [subprocess.Popen(cmd + ([f"--process_id={i}"] if processes > 1 else []), cwd=REPO,
                           env={**env, "PYTHONPATH": slow_exit} if slow_exit and i else env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
          for i in range(processes)]


def _train(workdir, cache_dir, processes: int, devices: int, *args):
  """Runs `python -m pretrain train` as `processes` processes of `devices` CPU devices each."""
  running = _start(workdir, cache_dir, processes, devices, *args)
  outputs = [p.communicate(timeout=600) for p in running]
  for p, (out, err) in zip(running, outputs):
    assert p.returncode == 0, err[-3000:]
  return outputs[0][0] + outputs[0][1]


@pytest.mark.slow
def test_two_processes_match_one_and_checkpoints_move_between_them(tmp_path, run_train, cache_dir, vocabulary):
  """data.streams=2: each of two processes prepares only the stream of its half of each batch, and the run is
  one device's in this process (which prepares both); checkpoints resume on the other process count and mesh."""
  del vocabulary  # Built first, so every process finds it cached.
  one = tmp_path / "one"
  result = run_train(one, *ARGS, "--config.train.steps=6", "--config.data.streams=2")
  assert result.returncode == 0, result.stderr[-3000:]
  expected = train_losses(one, with_eval=True)

  two = tmp_path / "two"
  _train(two, cache_dir, 2, 4, "--config.train.steps=2", "--config.data.streams=2")
  # Up to 6 steps of TINY's 8 rows of 32 tokens, their sums reduced across processes and devices in other orders.
  terms = 6 * numerics.gradient_terms(tiny_run().model.config, 8, 32)
  numerics.assert_close([train_losses(two, with_eval=True)[s] for s in (0, 1, 2)], [expected[s] for s in (0, 1, 2)],
                        terms=terms)
  from pretrain.train import checkpoint  # pylint: disable=g-import-not-at-top
  position = checkpoint.Checkpointer(str(two / "checkpoints"), keep=2).restore_data(2)
  assert [s["rows"] for s in position["streams"]] == [8, 8]  # Gathered from both processes.
  # Written by two processes, restored by one with another mesh ...
  out = _train(two, cache_dir, 1, 8, "--config.train.steps=4", "--config.data.streams=2", "--config.mesh.data=1",
               "--config.mesh.fsdp=8")
  assert "Resuming from the checkpoint at step 2" in out
  # ... and the reverse, ending with a sample decoded from parameters sharded over both processes. A damaged
  # newer step (a save cut short) is moved aside for all: a process that still knew it skipped the save of step 6,
  # where process 0 waited for it.
  shutil.copytree(two / "checkpoints" / "4", two / "checkpoints" / "6")
  state = two / "checkpoints" / "6" / "state"
  largest = max((p for p in state.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
  os.truncate(largest, largest.stat().st_size // 2)
  out = _train(two, cache_dir, 2, 4, "--config.train.steps=6", "--config.data.streams=2", "--config.mesh.data=2",
               "--config.mesh.fsdp=2", "--config.mesh.tensor=2", "--config.sample.num=1")
  assert "Resuming from the checkpoint at step 4" in out and "\n>>> " in out and "moved to" in out
  resumed = train_losses(two, with_eval=True)
  numerics.assert_close([resumed[s] for s in range(7)], [expected[s] for s in range(7)], terms=terms)


@pytest.mark.slow
def test_a_pipeline_stage_axis_across_processes_trains_on_the_whole_batch(tmp_path, run_train, cache_dir):
  """mesh.stage spanning the two processes (each holds one stage of every row): both read the same rows, the whole
    batch, and the run is one device's. Each read its own half before, a batch of 4 rows that differed."""
  pipeline = ["--config.model.num_layers=2", "--config.model.scan_layers=True", "--config.train.microbatches=2",
              "--config.train.steps=3"]
  one = tmp_path / "one"
  result = run_train(one, *ARGS, *pipeline)
  assert result.returncode == 0, result.stderr[-3000:]
  two = tmp_path / "two"
  _train(two, cache_dir, 2, 4, *pipeline, "--config.mesh.data=1", "--config.mesh.stage=2", "--config.mesh.fsdp=4")
  terms = 3 * numerics.gradient_terms(tiny_run(*pipeline[:2]).model.config, 8, 32)
  numerics.assert_close(train_losses(two, with_eval=True), train_losses(one, with_eval=True), terms=terms)


@pytest.mark.slow
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
  assert "Resuming from the checkpoint at step 2" in out and "each block's order of examples changes" in out


@pytest.mark.slow
def test_two_processes_evaluate_a_split_whose_shares_end_at_other_batches(tmp_path, cache_dir, vocabulary):
  """The whole validation split of two documents, one long and one short, each process reading its own
  (data.host_sharding=source): one's rows fill more batches than the other's, and both evaluate as many (the
  missing ones empty) rather than wait for each other's next step for ever."""
  (tmp_path / "train.txt").write_text("\n".join(f"the zebra number {i} eats grass in the field" for i in range(200)))
  (tmp_path / "validation.txt").write_text(" ".join(["a zebra eats grass"] * 60) + "\nthe field\n")
  files = ("--config.data.source=files", f"--config.data.train_files={tmp_path}/train.txt",
           f"--config.data.validation_files={tmp_path}/validation.txt",
           f"--config.tokenizer.path={vocabulary.sentencepiece_model_file}", "--config.data.host_sharding=source",
           "--config.train.eval_batches=1000", "--config.train.steps=2")
  running = _start(tmp_path / "run", cache_dir, 2, 4, *files)
  try:
    outputs = [p.communicate(timeout=300) for p in running]
  finally:
    for p in running:
      p.kill()
  assert [p.returncode for p in running] == [0, 0], [err[-2000:] for _, err in outputs]
  assert all(np.isfinite(loss) for loss in train_losses(tmp_path / "run", with_eval=True).values())


@pytest.mark.slow
def test_sigterm_to_one_process_stops_both_at_one_checkpoint(tmp_path, cache_dir, vocabulary):
  """A preemption's SIGTERM reaches each host at its own moment; here only process 1's: the two agree on the stop
  (every log_every steps), save the same step together and exit 128 + SIGTERM, and the rerun resumes from it. A
  stop, and an error every process raises (a NaN loss on the rerun), end every process with its own exit code and
  line though process 1 is slow to exit (SLOW_EXIT): the processes leave together."""
  del vocabulary
  workdir, slow = tmp_path / "run", str(tmp_path / "slow_exit")
  every = ("--config.train.log_every=2", "--config.train.eval_every=1000")
  running = _start(workdir, cache_dir, 2, 4, "--config.train.steps=100000", *every, slow_exit=slow)
  try:
    deadline = time.time() + 300
    while len(train_losses(workdir)) < 2:
      assert all(p.poll() is None for p in running) and time.time() < deadline, "the run ended before the signal"
      time.sleep(0.2)
    running[1].send_signal(signal.SIGTERM)
    outputs = [p.communicate(timeout=120) for p in running]
  finally:
    for p in running:
      p.kill()
  assert [p.returncode for p in running] == [128 + signal.SIGTERM] * 2, [err[-2000:] for _, err in outputs]
  from pretrain.train import checkpoint  # pylint: disable=g-import-not-at-top
  saved = checkpoint.Checkpointer(str(workdir / "checkpoints"), keep=2).latest_step()
  assert saved is not None and saved % 2 == 0, saved
  diverging = ("--config.optimizer.learning_rate=1e12", "--config.optimizer.grad_clip=1e30")
  running = _start(workdir, cache_dir, 2, 4, f"--config.train.steps={saved + 4}", *every, *diverging, slow_exit=slow)
  outputs = [p.communicate(timeout=300) for p in running]
  assert [p.returncode for p in running] == [2, 2], [err[-2000:] for _, err in outputs]
  assert f"Resuming from the checkpoint at step {saved}" in outputs[0][0] + outputs[0][1]
  assert all("became NaN or Inf at step" in err and "lost process" not in err for _, err in outputs)


@pytest.mark.slow
def test_a_cooldown_on_two_processes_of_a_stream_run_is_one_process_s(tmp_path, run_train, run_pretrain, cache_dir):
  """pretrain cooldown joins the processes before it opens the parent's checkpoints (which starts JAX), and in a
  stream context (data.context=stream) two processes train and evaluate the branch as one does: each host's
  evaluation rows are cut from the whole text in order, not from its shard of the documents (data.host_sharding
  source, the default, would give it every other document)."""
  stream = ("--config.data.context=stream", "--config.train.batch_size=8", "--config.train.eval_every=2")
  parent = tmp_path / "parent"
  result = run_train(parent, *stream, "--config.optimizer.schedule=wsd", "--config.optimizer.warmup_steps=1",
                     "--config.train.steps=6", "--config.optimizer.decay_steps=2", "--config.train.keep_steps=(2,)")
  assert result.returncode == 0, result.stderr[-3000:]
  branch = ("cooldown", f"--workdir={parent}", "--from_step=2", "--steps=2")
  one = run_pretrain(*branch, f"--out={tmp_path / 'one'}")
  assert one.returncode == 0, one.stderr[-3000:]
  port = _free_port()
  running = [subprocess.Popen([sys.executable, "-m", "pretrain", *branch, f"--out={tmp_path / 'two'}",
                               f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2", f"--process_id={i}"],
                              cwd=REPO, env={**fake_devices(4), "PRETRAIN_CACHE": cache_dir},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
  for p, (_, err) in zip(running, [p.communicate(timeout=600) for p in running]):
    assert p.returncode == 0, err[-3000:]
  from pretrain.train import metrics  # pylint: disable=g-import-not-at-top
  # Bits per byte: the loss of the barely trained model hardly tells rows apart, the bytes of their text do.
  evals = [{r["step"]: r["eval/bits_per_byte"] for r in metrics.read(str(tmp_path / run)) if "eval/loss" in r}
           for run in ("two", "one")]
  assert list(evals[0]) == [4]
  # 2 steps of 8 rows of 32 tokens, their sums reduced across processes and devices in other orders.
  terms = 2 * numerics.gradient_terms(tiny_run().model.config, 8, 32)
  numerics.assert_close([train_losses(tmp_path / "two")[s] for s in (3, 4)] + list(evals[0].values()),
                        [train_losses(tmp_path / "one")[s] for s in (3, 4)] + list(evals[1].values()), terms=terms)


HEARTBEAT = 5  # Seconds: a killed process 1 is found lost within this (a killed coordinator at once).
LOST = ("--config.train.steps=12", "--config.train.checkpoint_every=2", "--config.train.eval_every=1000",
        "--config.train.eval_batches=1", f"--heartbeat_timeout_seconds={HEARTBEAT}")


def _lose(workdir, cache_dir, victim: int, step: int) -> str:
  """Starts a two-process run, SIGKILLs process `victim` once the checkpoint of `step` is committed, and returns
  what the other process wrote to stderr as it ended (within the heartbeat timeout, checked here with a margin)."""
  running = _start(workdir, cache_dir, 2, 4, *LOST)
  deadline = time.time() + 300
  while not (workdir / "checkpoints" / str(step)).exists():
    assert all(p.poll() is None for p in running) and time.time() < deadline, "the run ended before the kill"
    time.sleep(0.01)
  running[victim].send_signal(signal.SIGKILL)
  killed = time.time()
  survivor = running[1 - victim]
  _, err = survivor.communicate(timeout=120)
  waited = time.time() - killed
  running[victim].communicate(timeout=60)
  assert survivor.returncode != 0 and waited < HEARTBEAT + 20, (survivor.returncode, waited, err[-3000:])
  return err


@pytest.mark.slow
def test_a_lost_process_ends_the_other_with_one_line_and_the_rerun_resumes_exactly(tmp_path, cache_dir, vocabulary):
  """Process 1, then the coordinator, is killed after a checkpoint: the other process ends with one line naming
  it (not JAX's native crash report), and the same command rerun resumes to the losses of a run never stopped."""
  del vocabulary
  straight, lost = tmp_path / "straight", tmp_path / "lost"
  _train(straight, cache_dir, 2, 4, *LOST)
  fix = "the last committed checkpoint is intact; rerun the same command on all hosts to resume"
  for victim, step, named in ((1, 2, "error: lost process 1 of 2: "),
                              (0, 6, "error: lost process 0 of 2, the coordinator: ")):
    err = _lose(lost, cache_dir, victim, step)
    last = err.strip().splitlines()[-1]
    assert last.startswith(named) and last.endswith(fix), err[-3000:]
    assert err.count("error: ") == 1 and not any(noise in err for noise in ("Check failure", "terminate", "Traceback"))
  out = _train(lost, cache_dir, 2, 4, *LOST)
  assert "Resuming from the checkpoint at step 6" in out
  assert train_losses(lost) == train_losses(straight)


@pytest.mark.slow
def test_the_line_for_each_report_of_a_lost_process():
  """JAX's and gloo's reports (jaxlib 0.10), as the process they end wrote them, and the line that replaces each."""
  from pretrain.parallel import lost_process  # pylint: disable=g-import-not-at-top
  fatal = ("F1127 13:22:42.736867    7324 client.h:80] Terminating process because the JAX distributed service "
           "detected fatal errors. [...] absl::Status: ")
  unhealthy = fatal + ("UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n1\nThe tasks "
                       "have crashed. [...]\n*** Check failure stack trace: ***\n    @     0x7fc4ba288634  absl::...")
  assert lost_process.verdict(unhealthy, 0, 2).startswith("error: lost process 1 of 2: no heartbeat came within")
  assert lost_process.verdict(unhealthy, 1, 2).startswith("error: the coordinator heard no heartbeat from this "
                                                          "process (process 1 of 2)")
  several = unhealthy.replace("\n1\n", "\n2\n3\n")
  assert lost_process.verdict(several, 0, 4).startswith("error: lost process 2 of 4 and process 3 of 4: ")
  for coordinator_gone in (
      fatal + "UNAVAILABLE: Failed to send RPC to coordination service. Either the leader task was preempted/died/"
      "restarted unexpectedly [...]\nRPC: /xla.coordination.CoordinationService/PollForError",  # Its process died.
      fatal + "DEADLINE_EXCEEDED: Deadline Exceeded\n\nRPC: /xla.coordination.CoordinationService/Heartbeat"):  # Host.
    assert lost_process.verdict(coordinator_gone, 1, 2).startswith("error: lost process 0 of 2, the coordinator: it "
                                                                   "can no longer be reached")
  gloo = ("terminate called after throwing an instance of 'gloo::EnforceNotMet'\n  what():  [enforce fail at "
          "external/gloo/gloo/transport/tcp/pair.cc:459] op.preamble.length <= op.nbytes. 8 vs 4.")
  assert lost_process.verdict(gloo, 0, 2).startswith("error: lost process 1 of 2: a collective with it broke off")
  assert lost_process.verdict(gloo, 1, 3).startswith("error: lost a process of the run (gloo names none)")
  raised = ("error: the checkpoint of step 7 could not be written to /w/checkpoints (UNKNOWN: Gloo AllGather failed: "
            "[external/gloo/gloo/transport/tcp/pair.cc:538] Read error [127.0.0.1]:55449: Connection reset by peer)")
  assert lost_process.verdict(raised, 1, 2).startswith("error: lost process 0 of 2, the coordinator: a collective")
  closed = "UNKNOWN: Gloo all-reduce failed: [external/gloo/gloo/transport/tcp/pair.cc] Connection closed by peer "
  assert lost_process.verdict(f"error: the checkpoint of step 6 could not be written ({closed}[127.0.0.1]:11406)", 1,
                              2).startswith("error: lost process 0 of 2, the coordinator: a collective")
  for line in map(lost_process.verdict, (unhealthy, gloo), (0, 0), (2, 2)):
    assert "\n" not in line and line.endswith("rerun the same command on all hosts to resume")
  # Any other report is passed on as written.
  assert lost_process.verdict(fatal + "INTERNAL: something else", 0, 2) is None
  assert lost_process.verdict("Traceback (most recent call last):\nValueError: a bug", 0, 2) is None


@pytest.mark.slow
def test_the_relay_passes_output_on_and_puts_the_line_in_place_of_the_report():
  """What a process writes reaches its stderr as written, a native error after a moment; a report of a lost
  process, as the process ends, becomes the one line."""
  import select  # pylint: disable=g-import-not-at-top
  from pretrain.parallel import lost_process  # pylint: disable=g-import-not-at-top
  bar = b"\r 2/16 [00:01<00:07, loss=8.330]"
  error = b"E1127 13:22:42.736018    7313 coordination_service.cc:1549] Use error polling [...]\n"
  report = (b"F1127 13:22:42.736867    7324 client.h:80] Terminating process because the JAX distributed service "
            b"detected fatal errors. [...] absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped "
            b"sending heartbeats):\n1\nThe tasks have crashed.\n*** Check failure stack trace: ***\n    @ 0x7f...\n")
  relay = subprocess.Popen([sys.executable, lost_process.__file__, "0", "2", "0"], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE)
  relay.stdin.write(bar + error)
  relay.stdin.flush()
  passed = b""
  deadline = time.time() + 10
  while passed != bar + error and time.time() < deadline:  # The error after about a second, the run going on.
    if select.select([relay.stdout], [], [], 0.1)[0]:
      passed += os.read(relay.stdout.fileno(), 1 << 16)
  assert passed == bar + error
  out, _ = relay.communicate(bar + error + report)
  line = lost_process.verdict(report.decode(), 0, 2)
  assert out == bar + b"\n" + line.encode() + b"\n"
  healthy = subprocess.run([sys.executable, lost_process.__file__, "0", "2", "0"], input=bar + error + b"Done.\n",
                           capture_output=True, check=True)
  assert healthy.stdout == bar + error + b"Done.\n"


@pytest.mark.slow
def test_a_collective_that_broke_off_gives_the_line_only_however_slowly_it_ends():
  """Gloo's failure logged with its traceback by a thread (Orbax's save, say) while the run goes on until JAX's
  heartbeat check ends it, or raised and printed frame by frame on a loaded machine: held to the end, the one
  line in its place, not the traceback (then the line)."""
  import select  # pylint: disable=g-import-not-at-top
  from pretrain.parallel import lost_process  # pylint: disable=g-import-not-at-top
  bar = b"\r 5/40 [00:03<00:20, loss=8.330]"
  frames = b"Traceback (most recent call last):\n" + b'  File "loop.py", line 1, in train\n    save()\n' * 15
  raised = (b"jax.errors.JaxRuntimeError: UNKNOWN: Gloo AllGather failed: [external/gloo/gloo/transport/tcp/"
            b"pair.cc:538] Read error [127.0.0.1]:55449: Connection reset by peer\n")
  report = (b"F1128 21:02:19.736867    7324 client.h:80] Terminating process because the JAX distributed service "
            b"detected fatal errors. [...] absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped "
            b"sending heartbeats):\n1\nThe tasks have crashed.\n*** Check failure stack trace: ***\n")
  for first, then in (
      (b"E1128 21:02:13.120417 140234 async_checkpointer.py:88] The save of step 6 failed\n" + frames + raised,
       bar + report),  # Logged by absl, then JAX's report.
      (b"Exception in thread Thread-4 (_save):\n" + frames + raised, bar + report),  # A thread's.
      (frames, raised)):  # The process's own, its last line a while after its first.
    relay = subprocess.Popen([sys.executable, lost_process.__file__, "0", "2", "0"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    relay.stdin.write(bar + first)
    relay.stdin.flush()
    passed, deadline = b"", time.time() + 2 * lost_process._HOLD_SECONDS  # pylint: disable=protected-access
    while time.time() < deadline:  # Past the moment a native error or traceback alone is passed on.
      if select.select([relay.stdout], [], [], 0.1)[0]:
        passed += os.read(relay.stdout.fileno(), 1 << 16)
    assert passed == bar
    out, _ = relay.communicate(then)
    assert out == b"\n" + lost_process.verdict((first + then).decode(), 0, 2).encode() + b"\n"


@pytest.mark.slow
def test_incomplete_process_flags_are_refused(tmp_path, cache_dir):
  result = subprocess.run([sys.executable, "-m", "pretrain", "train", f"--workdir={tmp_path}", "--num_processes=2"],
                          cwd=REPO, capture_output=True, text=True, env={**os.environ, "PRETRAIN_CACHE": cache_dir})
  assert result.returncode == 2
  assert "--coordinator_address, --process_id missing" in result.stderr


@pytest.mark.slow
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


@pytest.mark.slow
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
