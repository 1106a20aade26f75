"""A run's workdir files cut or damaged by something other than the run: a metrics.jsonl whose last line was cut
(read without it), a damaged line before it (one error naming the line), a run.lock of garbage bytes (taken as a
stale run's lock), goodput.json damaged or another run's. A command that only reads a run names the damage; training
moves every such file aside (pretrain/system/aside.py) and goes on. The damaged config.json and a file where
checkpoints/ goes are cases of test_bad_inputs.py for the commands that read a run."""

import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from pretrain import cli
from pretrain.commands import goodput as goodput_command
from pretrain.system.errors import UserError
from pretrain.train import goodput, metrics
from pretrain.workdir.lock import LOCK_FILE, WorkdirLock
from tests.conftest import REPO


def _records(n: int) -> str:
  return "".join(json.dumps({"step": s, "train/loss": 5.0 - s, "eval/loss": 5.0 - s}) + "\n" for s in range(1, n + 1))


def test_a_cut_last_metrics_line_is_left_out_and_the_curves_drawn(tmp_path, capsys):
  (tmp_path / metrics.METRICS_FILE).write_text(_records(4) + '{"step": 5, "train/lo')
  assert [r["step"] for r in metrics.read(str(tmp_path))] == [1, 2, 3, 4]
  assert "its last line, is cut short" in capsys.readouterr().out
  assert cli.main(["plot", f"--workdir={tmp_path}"]) == 0
  assert (tmp_path / metrics.CURVES_FILE).stat().st_size > 0


def test_a_damaged_metrics_line_before_the_last_is_named(tmp_path):
  (tmp_path / metrics.METRICS_FILE).write_bytes(_records(2).encode() + b"\xff\xfe garbage\n" + _records(1).encode())
  with pytest.raises(UserError, match=r"metrics.jsonl:3 is not a metrics record .*delete that line"):
    metrics.read(str(tmp_path))


@pytest.mark.parametrize("garbage", [b"\x00\xff\xfe\x81garbage", b"not json", b"[1, 2]",
                                     b'{"pid": "abc", "heartbeat": "soon", "host": "h"}', b'{"pid": 1.5}'])
def test_a_lock_of_garbage_is_taken_as_stale(tmp_path, capsys, garbage):
  (tmp_path / LOCK_FILE).write_bytes(garbage)
  with WorkdirLock(str(tmp_path)):
    assert json.loads((tmp_path / LOCK_FILE).read_text())["token"]
  assert not (tmp_path / LOCK_FILE).exists()
  assert "is not a lock this project wrote" in capsys.readouterr().out


def test_a_live_process_on_this_host_holds_its_lock_whatever_its_heartbeat(tmp_path):
  """A run suspended (Ctrl-Z) for longer than the lease is alive: its lock holds. Its pid taken by a process
  started after the lock (this one, against a lock a year old) does not hold it."""
  holder = {"host": socket.gethostname(), "pid": os.getpid(), "token": "theirs", "heartbeat": time.time() - 3600,
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}
  (tmp_path / LOCK_FILE).write_text(json.dumps(holder))
  with pytest.raises(UserError, match=f"in use by the run of pid {os.getpid()} on host"):
    with WorkdirLock(str(tmp_path)):
      pass
  if not os.path.exists("/proc/self/stat"):  # A process's start time: Linux's /proc.
    return
  holder["started"] = (datetime.datetime.now() - datetime.timedelta(days=365)).astimezone().isoformat()
  (tmp_path / LOCK_FILE).write_text(json.dumps(holder))
  with WorkdirLock(str(tmp_path)):
    assert json.loads((tmp_path / LOCK_FILE).read_text())["token"] != "theirs"


@pytest.mark.slow  # Starts a process.
def test_a_lock_that_cannot_be_written_is_one_line_and_leaves_no_empty_lock(tmp_path):
  """A disk that fills as the lock is written (files capped at 16 bytes: RLIMIT_FSIZE): one line naming the cause
  and the fix, not a traceback, and no empty run.lock left behind."""
  code = ("import resource, signal\nfrom pretrain.workdir.lock import WorkdirLock\n"
          "from pretrain.system.errors import UserError\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
          "resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))\n"
          f"try:\n  WorkdirLock({str(tmp_path)!r}).__enter__()\nexcept UserError as e:\n  print(e)\n")
  found = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
  assert found.returncode == 0, found.stderr
  assert f"the workdir's lock {tmp_path / LOCK_FILE} could not be written (File too large); free space" in found.stdout
  assert not (tmp_path / LOCK_FILE).exists()


_ACCOUNT = {"run": "0123456789ab", "attempts": [{"started": 1.0, "updated": 2.0, "steps": [0, 1],
                                                 **dict.fromkeys(goodput.PHASES, 0.1)}],
            "ledger": {"0": 0.0}, "clock": 0.1, "recomputed": 0.0, "rolled_back": 0.0}
# What takes the place of a goodput.json: each was a traceback of `pretrain goodput` and of the resume.
DAMAGED_ACCOUNTS = {
    "a directory": lambda path: path.mkdir(),
    "a copy cut short": lambda path: path.write_text(json.dumps(_ACCOUNT)[:60]),
    "a list": lambda path: path.write_text("[]"),
    "attempts that are numbers": lambda path: path.write_text(json.dumps({**_ACCOUNT, "attempts": [1, 2]})),
    "a phase's time that is text": lambda path: path.write_text(json.dumps(
        {**_ACCOUNT, "attempts": [{**_ACCOUNT["attempts"][0], "step": "long"}]})),
    "a ledger of names": lambda path: path.write_text(json.dumps({**_ACCOUNT, "ledger": {"first": 1.0}})),
}


@pytest.mark.parametrize("damage", DAMAGED_ACCOUNTS)
def test_a_damaged_goodput_file_is_named_and_set_aside_as_training_starts(tmp_path, capsys, damage):
  path = tmp_path / goodput.GOODPUT_FILE
  DAMAGED_ACCOUNTS[damage](path)
  with pytest.raises(SystemExit) as exited:
    cli.main(["goodput", f"--workdir={tmp_path}"])
  err = capsys.readouterr().err
  assert exited.value.code == 2 and "Traceback" not in err
  # The command that only reads says what is wrong, and what training will do (not that it starts an account).
  assert err.strip().splitlines() == [err.strip()] and err.startswith(f"error: {path} ")
  assert "the run's next start moves it aside" in err and "starts again from this process" not in err
  account = goodput.Goodput(str(tmp_path))
  assert sorted(p.name for p in tmp_path.iterdir()) == [goodput.GOODPUT_FILE]  # Nothing moved before the restore.
  account.resumed(0)
  [aside] = [p for p in tmp_path.iterdir() if p.name.startswith(f"{goodput.GOODPUT_FILE}.damaged-")]
  assert capsys.readouterr().out == (f"warning: {path} {err.split(f'{path} ')[1].split('; it is no account')[0]}; "
                                     f"moved aside to {aside}: the account starts again from this process\n")
  account.mark("step")
  assert account.write()["attempts"] == 1 and goodput.read(str(tmp_path))["run"] == account.run


def test_the_account_of_a_run_with_checkpoints_is_not_a_new_run_s(tmp_path, capsys):
  """A workdir without checkpoints starts a run: an account whose ledger holds checkpoints is another run's."""
  path = tmp_path / goodput.GOODPUT_FILE
  path.write_text(json.dumps({**_ACCOUNT, "ledger": {"0": 0.0, "100": 5.0}}))
  account = goodput.Goodput(str(tmp_path), checkpointed=False)
  account.resumed(0)
  assert "is the account of another run (one with checkpoints of steps 100; here are none)" in capsys.readouterr().out
  assert account.run != _ACCOUNT["run"] and len(account.record["attempts"]) == 1
  assert [p.name.split("-")[0] for p in tmp_path.iterdir() if p.name != path.name] == ["goodput.json.other"]


@pytest.mark.slow
def test_a_resume_sets_aside_every_file_it_cannot_take_and_trains_on(trained_run, run_train, tmp_path):
  """Another run's goodput.json copied in; a metrics.jsonl with an edited line; config.json and spm.model cut short;
  a directory where run.lock and curves.png go, a file where tensorboard/ goes: the commands that read the run name
  what is wrong, and the resume moves each aside with one line and trains on from its checkpoint."""
  run = tmp_path / "run"
  shutil.copytree(trained_run, run)
  account = json.loads((run / goodput.GOODPUT_FILE).read_text())
  ours = account["run"]
  (run / goodput.GOODPUT_FILE).write_text(json.dumps({**account, "run": "0123456789ab"}))
  lines = (run / metrics.METRICS_FILE).read_text().splitlines(keepends=True)
  (run / metrics.METRICS_FILE).write_text("".join([lines[0], '{"step": "two"}\n', *lines[1:]]))
  (run / "config.json").write_text((run / "config.json").read_text()[:100])
  (run / LOCK_FILE).mkdir()
  (run / metrics.CURVES_FILE).unlink()
  (run / metrics.CURVES_FILE).mkdir()
  shutil.rmtree(run / "tensorboard")
  (run / "tensorboard").write_text("not a directory")
  vocabulary = (run / "spm.model").read_bytes()
  (run / "spm.model").write_bytes(vocabulary[:1000])
  with pytest.raises(UserError, match=rf"is the account of another run \(run 0123456789ab; the checkpoints here are "
                                      rf"run {ours}'s\)"):
    goodput_command.main.__wrapped__([f"--workdir={run}"])
  result = run_train(run, "--config.train.steps=4", "--config.train.eval_batches=3")
  assert result.returncode == 0, result.stderr[-3000:]
  out = result.stdout + result.stderr
  assert "Resuming from the checkpoint at step 3" in out
  warnings = [line for line in out.splitlines() if line.startswith("warning: ")]
  moved = {line.split(" ")[1].rsplit("/", 1)[1]: line for line in warnings}
  assert sorted(moved) == sorted([goodput.GOODPUT_FILE, metrics.METRICS_FILE, "config.json", LOCK_FILE,
                                  metrics.CURVES_FILE, "tensorboard", "spm.model"]) and len(warnings) == len(moved), \
      warnings
  assert "is the account of another run" in moved[goodput.GOODPUT_FILE] and ".other-run-" in moved[goodput.GOODPUT_FILE]
  assert "is damaged (line 2: no step)" in moved[metrics.METRICS_FILE]
  for name, line in moved.items():
    aside = line.split("moved aside to ")[1].split(":")[0]
    assert aside.startswith(f"{run}/{name}.") and (run / aside.rsplit("/", 1)[1]).exists()
  # The run's own files again: its account (one attempt, its id), its records (those it read, then its own).
  assert goodput.read(str(run))["run"] == ours and len(goodput.read(str(run))["attempts"]) == 1
  assert [r["step"] for r in metrics.read(str(run)) if "train/loss" in r] == [1, 2, 3, 4]
  assert json.loads((run / "config.json").read_text())["train"]["steps"] == 4
  assert (run / "tensorboard").is_dir() and (run / metrics.CURVES_FILE).is_file() and not (run / LOCK_FILE).exists()
  assert (run / "spm.model").read_bytes() == vocabulary


@pytest.mark.slow
def test_a_run_whose_checkpoints_are_gone_sets_the_curves_aside_and_starts_afresh(trained_run, run_train, tmp_path):
  """checkpoints/ deleted or lost: the run in that workdir starts over, and the curves of the run that had them
  (metrics.jsonl, tensorboard/) are set aside with its goodput.json, not overwritten."""
  run = tmp_path / "run"
  shutil.copytree(trained_run, run)
  shutil.rmtree(run / "checkpoints")
  curves = (run / metrics.METRICS_FILE).read_text()
  result = run_train(run, "--config.train.steps=2")
  assert result.returncode == 0, result.stderr[-3000:]
  warnings = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("warning: ")]
  moved = {line.split(" ")[1].rsplit("/", 1)[1]: line for line in warnings}
  assert sorted(moved) == sorted([goodput.GOODPUT_FILE, metrics.METRICS_FILE, "tensorboard"]), warnings
  for name in (metrics.METRICS_FILE, "tensorboard"):
    assert "holds the curves of a run with checkpoints of steps 3, none of them here" in moved[name]
  aside = moved[metrics.METRICS_FILE].split("moved aside to ")[1].split(":")[0]
  assert open(aside).read() == curves
  assert [r["step"] for r in metrics.read(str(run)) if "train/loss" in r] == [1, 2]


@pytest.mark.slow
def test_commands_that_read_a_run_trust_its_checkpoints_over_its_config_and_vocabulary(trained_run, run_pretrain,
                                                                                      tmp_path, capsys):
  """config.json edited (or copied from another run): read as the checkpoints record it, with a line naming the
  field; the vocabulary file replaced: refused, as no other vocabulary can stand in for the parameters' own."""
  from pretrain import run as run_lib  # pylint: disable=g-import-not-at-top
  run = tmp_path / "run"
  shutil.copytree(trained_run, run)
  saved = json.loads((run / "config.json").read_text())
  saved["data"]["objective"] = "prefix_lm_decoder"
  (run / "config.json").write_text(json.dumps(saved))
  assert run_lib.saved_config(str(run)).data.objective == "clm"
  assert ("config.json is not the config its checkpoints record (data.objective='prefix_lm_decoder' there, 'clm' "
          "recorded); the run is read as they record it") in capsys.readouterr().out
  exported = run_pretrain("export", f"--workdir={run}", f"--out={tmp_path / 'hf'}")
  assert exported.returncode == 0 and "is not the config its checkpoints record" in exported.stdout, exported.stderr
  assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
  vocabulary = (run / "spm.model").read_bytes()
  (run / "spm.model").write_bytes(vocabulary[:-1] + bytes([vocabulary[-1] ^ 1]))  # One bit of another vocabulary.
  generated = run_pretrain("generate", f"--workdir={run}", "--prompt=The")
  assert generated.returncode == 2
  assert "spm.model is not the vocabulary the run's checkpoints were trained with" in generated.stderr.splitlines()[-1]
