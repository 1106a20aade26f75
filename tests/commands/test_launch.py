"""pretrain launch: the gcloud commands for a TPU VM slice and the sbatch script for SLURM.

gcloud, scontrol, srun and sbatch are small fakes on the PATH; the SLURM
script's srun line really trains, as two processes joined by jax.distributed.
"""

import glob
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tarfile

import pytest

from pretrain.commands import launch
from pretrain.train import metrics
from tests.conftest import REPO, fake_devices

OVERRIDES = ["--config.train.steps=7", "--gin.train.batch_size=8", "--config.data.mixture=(('corpus', '', 1.0),)"]
TPU = ["tpu-vm", "--name=my-tpu", "--zone=us-central2-b", "--project=proj", "--config=configs/quickstart.py",
       "--no_compile_check"]  # tests/parallel/test_compile.py runs the check.
# Small enough that two processes on a 2-core machine take well under a minute.
TINY_RUN = ["--config.train.steps=2", "--config.model.num_layers=1", "--config.model.d_model=64",
            "--config.model.num_heads=2", "--config.model.num_kv_heads=2", "--config.model.head_dim=32",
            "--config.model.mlp_dim=128", "--config.train.batch_size=4", "--config.data.seq_len=32",
            "--config.train.eval_every=2", "--config.train.eval_batches=1", "--config.train.checkpoint_every=2",
            "--config.sample.num=0"]  # Decoding over two processes: tests/parallel/test_multiprocess.py.


def _fake(directory, name: str, text: str) -> None:
  path = os.path.join(directory, name)
  with open(path, "w") as f:
    f.write(text)
  os.chmod(path, 0o755)


@pytest.fixture
def fake_gcloud(tmp_path, monkeypatch):
  """A gcloud on the PATH that logs its arguments, one JSON list a line; FAKE_GCLOUD_FAIL=scp makes scp exit 7."""
  bin_dir, log = tmp_path / "bin", tmp_path / "gcloud.log"
  bin_dir.mkdir()
  _fake(bin_dir, "gcloud", f"#!{sys.executable}\nimport json, os, sys\n"
        f"with open({str(log)!r}, 'a') as f:\n  f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "sys.exit(7 if os.environ.get('FAKE_GCLOUD_FAIL') in sys.argv[1:5] else 0)\n")
  monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
  monkeypatch.delenv("FAKE_GCLOUD_FAIL", raising=False)
  return lambda: [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _launch(capsys, *argv) -> tuple[int, str, str]:
  """Runs `pretrain launch ARGV` here; argparse's and UserError's exits become exit codes."""
  try:
    code = launch.main(list(argv))
  except SystemExit as e:
    code = e.code
  out, err = capsys.readouterr()
  return code, out, err


def test_tpu_vm_prints_create_copy_install_and_train_for_every_worker(capsys, fake_gcloud):
  code, out, _ = _launch(capsys, *TPU, "--accelerator_type=v4-32", "--create", "--workdir=gs://bucket/run", *OVERRIDES)
  assert code == 0
  header, *lines = out.splitlines()
  assert header.startswith("# v4-32: 4 hosts, 16 JAX devices (16 chips)")
  create, pack, scp, install, train = map(shlex.split, lines)
  gcloud = ["gcloud", "compute", "tpus", "tpu-vm"]
  where = ["--zone=us-central2-b", "--project=proj"]
  assert create == [*gcloud, "create", "my-tpu", *where, "--accelerator-type=v4-32", "--version=tpu-ubuntu2204-base"]
  assert pack[:2] == ["bash", "-c"] and "git -C" in pack[2] and "tar --create" in pack[2]
  tarball = scp[5]
  assert scp == [*gcloud, "scp", tarball, "my-tpu:pretrain.tar.gz", *where, "--worker=all"]
  for ssh in (install, train):
    assert ssh[:9] == [*gcloud, "ssh", "my-tpu", *where, "--worker=all"]
    assert ssh[9].startswith("--command=") and len(ssh) == 10
    subprocess.run(["bash", "-n", "-c", ssh[9][len("--command="):]], check=True)  # The workers' shell can read it.
  assert "pip install" in install[9] and "-e ." in install[9] and "'jax[tpu]>=0.10,<0.11'" in install[9]
  remote = shlex.split(train[9][len("--command="):])  # What each worker's shell runs.
  assert remote[:3] == ["cd", "~/pretrain", "&&"]
  assert remote[3:] == [".venv/bin/python", "-m", "pretrain", "train", "--config=configs/quickstart.py",
                        "--workdir=gs://bucket/run", *OVERRIDES]  # No coordinator flags: JAX finds the hosts.
  assert not fake_gcloud()  # Printed, not run.


def test_tpu_vm_creates_only_when_asked_and_uses_the_generation_s_software(capsys):
  code, out, _ = _launch(capsys, *TPU, "--accelerator_type=v4-8", "--workdir=runs/local")  # One host: local is fine.
  assert code == 0 and out.startswith("# v4-8: 1 host, 4 JAX devices (4 chips)\n")
  assert not any(" create " in line for line in out.splitlines())
  _, out, _ = _launch(capsys, *TPU, "--accelerator_type=v6e-16", "--create", "--workdir=gs://b/r")
  assert "--version=v2-alpha-tpuv6e" in out.splitlines()[1]
  _, out, _ = _launch(capsys, *TPU, "--accelerator_type=v5p-8", "--create", "--version=mine", "--workdir=gs://b/r")
  assert "--version=mine" in out.splitlines()[1]


@pytest.mark.parametrize("accelerator_type, hosts, devices", [
    ("v2-8", 1, 8), ("v3-32", 4, 32), ("v4-8", 1, 4), ("v4-32", 4, 16), ("v4-128", 16, 64), ("v5p-8", 1, 4),
    ("v5p-16", 2, 8), ("v5litepod-1", 1, 1), ("v5litepod-8", 1, 8), ("v5litepod-16", 4, 16), ("v6e-8", 1, 8),
    ("v6e-256", 64, 256)])
def test_tpu_host_and_device_counts(accelerator_type, hosts, devices):
  tpu = launch.tpu_slice(accelerator_type)
  assert (tpu.hosts, tpu.devices) == (hosts, devices)


@pytest.mark.parametrize("argv, message", [
    (["--accelerator_type=v4-12", "--workdir=gs://b/r"], "multiple of 8"),
    (["--accelerator_type=tpu-32", "--workdir=gs://b/r"], "use v2-N, v3-N, v4-N, v5p-N"),
    (["--accelerator_type=v5litepod-12", "--workdir=gs://b/r"], "1, 4, 8, 16"),
    (["--accelerator_type=v4-32", "--workdir=runs/x"], "use a Cloud Storage bucket, --workdir=gs://"),
    (["--accelerator_type=v4-8", "--workdir=gs://b/r", "--config.train.stepz=3"], "train.steps"),
    (["--accelerator_type=v4-8", "--workdir=gs://b/r", "--config.train.steps", "3"], "--config.train.steps=VALUE"),
    (["--accelerator_type=v4-8", "--workdir=gs://b/r", "--config=/etc/passwd"], "outside the repository"),
    (["--accelerator_type=v4-8", "--workdir=gs://b/r", "--config=configs/nope.py"], "does not exist"),
])
def test_tpu_vm_refuses_mistakes_with_the_fix(capsys, argv, message):
  code, out, err = _launch(capsys, *TPU, *argv)
  assert code == 2 and not out
  assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1


def test_a_local_workdir_on_a_multi_host_slice_can_be_allowed(capsys):
  code, _, _ = _launch(capsys, *TPU, "--accelerator_type=v4-32", "--workdir=/mnt/shared/run", "--allow_local_workdir")
  assert code == 0


def test_a_missing_flag_is_one_error_line(capsys):
  code, out, err = _launch(capsys, "tpu-vm", "--zone=z", "--accelerator_type=v4-8", "--workdir=gs://b/r")
  assert code == 2 and not out
  assert err.splitlines()[-1] == ("error: pretrain launch tpu-vm: the following arguments are required: --name "
                                  "(see --help)")


def test_tpu_vm_run_executes_the_printed_commands_and_stops_at_the_first_failure(capsys, fake_gcloud, tmp_path,
                                                                                 monkeypatch):
  argv = [*TPU, "--accelerator_type=v4-32", "--create", "--workdir=gs://bucket/run", f"--tarball={tmp_path}/src.tgz",
          *OVERRIDES]
  _, printed, _ = _launch(capsys, *argv)
  printed = [shlex.split(line) for line in printed.splitlines()[1:]]
  code, _, _ = _launch(capsys, *argv, "--run")
  assert code == 0
  assert fake_gcloud() == [c[1:] for c in printed if c[0] == "gcloud"]  # All of them, in order.
  with tarfile.open(tmp_path / "src.tgz") as tar:  # The pack step ran: the repository without .venv or caches.
    names = tar.getnames()
  assert {"setup.py", "pretrain/commands/launch.py", "configs/quickstart.py"} <= set(names)
  assert not [n for n in names if n.startswith((".venv/", "runs/", ".git/")) or "__pycache__" in n]

  (tmp_path / "gcloud.log").unlink()
  monkeypatch.setenv("FAKE_GCLOUD_FAIL", "scp")
  code, _, err = _launch(capsys, *argv, "--run")
  assert code == 7 and "exit code 7" in err
  assert [c[3] for c in fake_gcloud()] == ["create", "scp"]  # Neither install nor train after the failed copy.


def _slurm_script(capsys, tmp_path, *argv) -> str:
  out = tmp_path / "job.sh"
  code, stdout, err = _launch(capsys, "slurm", f"--out={out}", f"--log={tmp_path}/logs/%x-%j.out", *argv)
  assert code == 0, err
  assert stdout == f"Wrote {out}; submit it with: sbatch {out}\n"
  return out.read_text()


def test_slurm_script_is_valid_bash_with_the_sbatch_lines(capsys, tmp_path):
  (tmp_path / "venv" / "bin").mkdir(parents=True)
  (tmp_path / "venv" / "bin" / "activate").touch()
  script = _slurm_script(capsys, tmp_path, "--nodes=4", "--gpus_per_node=8", "--cpus_per_task=16", "--time=2-00:00:00",
                         "--partition=gpu", "--account=lab", "--job_name=big", f"--venv={tmp_path}/venv",
                         f"--workdir={tmp_path}/run", *OVERRIDES)
  subprocess.run(["bash", "-n", tmp_path / "job.sh"], check=True)
  sbatch = [line.split(None, 1)[1] for line in script.splitlines() if line.startswith("#SBATCH ")]
  assert sbatch == ["--job-name=big", "--nodes=4", "--ntasks-per-node=1", "--gpus-per-node=8", "--cpus-per-task=16",
                    "--time=2-00:00:00", "--partition=gpu", "--account=lab", f"--chdir={REPO}",
                    f"--output={tmp_path}/logs/%x-%j.out"]
  assert os.path.isdir(tmp_path / "logs")  # Slurm would not create it.
  assert "set -euo pipefail" in script and f"source {tmp_path}/venv/bin/activate" in script
  srun = shlex.split(script[script.index("\nsrun "):].replace("\\\n", " "))
  assert srun[-len(OVERRIDES):] == OVERRIDES


@pytest.mark.slow
def test_slurm_script_trains_with_two_processes(capsys, tmp_path, cache_dir, vocabulary):
  """The script's own srun line, run by a fake srun as 2 local tasks: each must get its own process id."""
  del vocabulary  # Built first, so the processes find it cached.
  bin_dir, tasks, workdir = tmp_path / "bin", tmp_path / "tasks", tmp_path / "run"
  bin_dir.mkdir()
  tasks.mkdir()
  _fake(bin_dir, "scontrol", '#!/bin/bash\n[[ "$1 $2" == "show hostnames" ]] && printf "127.0.0.1\\n127.0.0.2\\n"\n')
  # Like srun in an allocation: $SLURM_NTASKS copies of the command, each with its SLURM_PROCID; as with
  # --kill-on-bad-exit, the first task to fail ends the others (a lone survivor would wait for its peer).
  _fake(bin_dir, "srun", '#!/bin/bash\nprintf "%s\\n" "$*" > "$FAKE_SRUN_DIR/argv"\n'
        'while [[ "$1" == -* ]]; do shift; done\npids=()\n'
        'for ((i = 0; i < SLURM_NTASKS; i++)); do\n'
        '  SLURM_PROCID=$i SLURM_NODEID=$i SLURM_LOCALID=0 "$@" > "$FAKE_SRUN_DIR/task$i.log" 2>&1 &\n'
        '  pids+=($!)\ndone\nstatus=0\nfor pid in "${pids[@]}"; do\n'
        '  wait -n || { status=1; kill -9 "${pids[@]}" 2>/dev/null; }\ndone\nexit $status\n')
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  venv = sys.prefix if os.path.isfile(os.path.join(sys.prefix, "bin", "activate")) else "none"
  _slurm_script(capsys, tmp_path, "--nodes=2", "--gpus_per_node=1", f"--port={port}", f"--venv={venv}",
                f"--workdir={workdir}", "--config=configs/quickstart.py", *TINY_RUN)
  path = os.pathsep.join([str(bin_dir), os.path.dirname(sys.executable), os.environ["PATH"]])
  env = {**fake_devices(1), "PATH": path,
         "FAKE_SRUN_DIR": str(tasks), "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_ID": "4242",
         "SLURM_NNODES": "2", "SLURM_NTASKS": "2", "PRETRAIN_CACHE": cache_dir}
  env.pop("SLURM_PROCID", None)
  job = subprocess.Popen(["bash", tmp_path / "job.sh"], env=env, start_new_session=True, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
  try:
    output = job.communicate(timeout=300)[0]
  except subprocess.TimeoutExpired:
    os.killpg(job.pid, signal.SIGKILL)  # The job's shell, fake srun and both trainers.
    raise
  logs = [(tasks / f"task{i}.log").read_text() for i in range(2)]
  assert job.returncode == 0, output + "\n".join(log[-3000:] for log in logs)
  assert "--ntasks-per-node=1" in (tasks / "argv").read_text()
  for i, log in enumerate(logs):
    assert f"pretrain: process {i} of 2 on " in log and f"coordinator 127.0.0.1:{port}" in log
  assert "Trained 2 steps" in logs[0] and "Trained" not in logs[1]  # Only process 0 reports.
  assert any(r["step"] == 2 and "train/loss" in r for r in metrics.read(str(workdir)))
  # Each process wrote its shards of the checkpoint: jax.distributed had joined them as processes 0 and 1.
  assert glob.glob(f"{workdir}/checkpoints/2/*/ocdbt.process_1")


def test_slurm_run_submits_the_script(capsys, tmp_path, monkeypatch):
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  _fake(bin_dir, "sbatch", f'#!/bin/bash\necho "$@" > {tmp_path}/sbatch.log\nexit 3\n')
  monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
  code, _, _ = _launch(capsys, "slurm", "--nodes=1", "--gpus_per_node=8", f"--workdir={tmp_path}/run",
                       f"--out={tmp_path}/job.sh", f"--log={tmp_path}/%j.out", "--run")
  assert code == 3  # sbatch's own exit code.
  assert (tmp_path / "sbatch.log").read_text() == f"{tmp_path}/job.sh\n"


@pytest.mark.parametrize("argv, message", [
    (["--gpus_per_node=8", "--workdir=w"], "the following arguments are required: --nodes"),
    (["--nodes=0", "--gpus_per_node=8", "--workdir=w"], "argument --nodes: give at least 1, not 0"),
    (["--nodes=2", "--gpus_per_node=0", "--workdir=w"], "argument --gpus_per_node: give at least 1, not 0"),
    (["--nodes=2", "--gpus_per_node=8", "--workdir=w", "--run"], "add --out=FILE"),
    (["--nodes=2", "--gpus_per_node=8", "--workdir=w", "--time=1h"], "HH:MM:SS"),
    (["--nodes=2", "--gpus_per_node=8", "--workdir=w", "--venv=/nonexistent"], "--venv=none"),
    (["--nodes=2", "--gpus_per_node=8", "--workdir=w", "--port=70000"], "argument --port: give at least 0 and at most "
                                                                       "65535, not 70000"),
])
def test_slurm_refuses_mistakes_with_the_fix(capsys, argv, message):
  code, out, err = _launch(capsys, "slurm", *argv)
  assert code == 2 and not out and message in err.splitlines()[-1]


@pytest.mark.parametrize("rule, message", [
    (["--config.model.parameterization=mup", "--config.optimizer.name=adafactor"], "mup is defined for optimizer.name"),
    (["--config.data.objective=mlm", "--config.train.harness_tasks=('pretrain_cloze',)"], "train.harness_tasks"),
    (["--config.mesh.fsdp=3"], "2 nodes x 8 GPUs: mesh {'data': -1, 'stage': 1, 'fsdp': 3, 'expert': 1, 'context': 1, "
                               "'tensor': 1} does not divide the 16 devices"),
    (["--config.mesh.rules=megatron"], "mesh.rules='megatron' is not a preset"),
])
def test_slurm_writes_no_script_for_a_config_that_breaks_a_rule(capsys, tmp_path, rule, message):
  """The hosts would fail as they build the model: the config's rules between fields are checked here first."""
  code, out, err = _launch(capsys, "slurm", "--nodes=2", "--gpus_per_node=8", f"--workdir={tmp_path}/run",
                           f"--out={tmp_path}/job.sh", *rule)
  assert code == 2 and not out and message in err.splitlines()[-1]
  assert not (tmp_path / "job.sh").exists()


def test_help_explains_every_flag_without_importing_jax():
  code = ("import sys; from pretrain.commands import launch\n"
          "for sub in ('tpu-vm', 'slurm'):\n"
          "  try: launch.main([sub, '--help'])\n"
          "  except SystemExit: pass\n"
          "assert 'jax' not in sys.modules")
  shown = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
  assert shown.returncode == 0, shown.stderr
  for flag in ("--name", "--zone", "--accelerator_type", "--create", "--allow_local_workdir", "--nodes",
               "--gpus_per_node", "--port", "--venv", "--out", "--run", "--workdir", "--config", "--gin_file"):
    assert f"  {flag} " in shown.stdout or f"  {flag}\n" in shown.stdout, flag


def test_the_script_s_missing_folders_are_made(capsys, tmp_path):
  """--out in a folder not made yet (as --help says of it): written there, where it was a FileNotFoundError."""
  out = tmp_path / "jobs" / "week1" / "job.sh"
  code, _, err = _launch(capsys, "slurm", "--nodes=1", "--gpus_per_node=8", f"--workdir={tmp_path}/run", f"--out={out}",
                         f"--log={tmp_path}/%j.out")
  assert code == 0 and out.read_text().startswith("#!/bin/bash"), err
  assert os.access(out, os.X_OK)


def test_a_cooldown_branch_launches_with_its_own_config(capsys, tmp_path):
  """pretrain train refuses --config for a cooldown branch's workdir, and launch always passed one: every host's
  trainer failed once the job started. A branch launches with its workdir and overrides alone."""
  from pretrain.config import schema  # pylint: disable=g-import-not-at-top
  saved = schema.defaults().to_dict()
  saved["train"]["parent"] = str(tmp_path / "parent")
  (tmp_path / "branch").mkdir()
  (tmp_path / "branch" / "config.json").write_text(json.dumps(saved))
  script = _slurm_script(capsys, tmp_path, "--nodes=2", "--gpus_per_node=8", f"--workdir={tmp_path}/branch",
                         "--config.train.log_every=5")
  srun = shlex.split(script[script.index("\nsrun "):].replace("\\\n", " "))
  assert f"--workdir={tmp_path}/branch" in srun and "--config.train.log_every=5" in srun
  assert not [a for a in srun if a.startswith(("--config=", "--gin_file="))]
  code, _, err = _launch(capsys, "slurm", "--nodes=2", "--gpus_per_node=8", f"--workdir={tmp_path}/branch",
                         "--config=lm_125m")
  assert code == 2 and "holds a cooldown branch" in err


def test_gin_search_paths_reach_the_check_and_every_host(capsys, tmp_path):
  """A gin include found through --gin_search_paths (as T5X's launches pass it): the config is checked with the
  folders and every host's trainer gets them; launch refused the flag before."""
  (tmp_path / "shared").mkdir()
  (tmp_path / "run.gin").write_text("include 'base.gin'\ntrain.log_every = 5\n")
  (tmp_path / "shared" / "base.gin").write_text("train.steps = 7\n")
  script = _slurm_script(capsys, tmp_path, "--nodes=2", "--gpus_per_node=8", f"--workdir={tmp_path}/run",
                         f"--gin_file={tmp_path}/run.gin", f"--gin_search_paths={tmp_path}/shared")
  srun = shlex.split(script[script.index("\nsrun "):].replace("\\\n", " "))
  assert f"--gin_search_paths={tmp_path}/shared" in srun and f"--gin_file={tmp_path}/run.gin" in srun
  (tmp_path / "shared" / "base.gin").write_text("train.stepz = 7\n")  # The check reads the included file.
  code, _, err = _launch(capsys, "slurm", "--nodes=2", "--gpus_per_node=8", f"--workdir={tmp_path}/run",
                         f"--out={tmp_path}/again.sh", f"--gin_file={tmp_path}/run.gin",
                         f"--gin_search_paths={tmp_path}/shared")
  assert code == 2 and "stepz" in err and not (tmp_path / "again.sh").exists()
  code, _, err = _launch(capsys, "tpu-vm", "--name=n", "--zone=z", "--accelerator_type=v4-8", "--workdir=gs://b/r",
                         "--no_compile_check", f"--gin_search_paths={tmp_path}/shared")
  assert code == 2 and "--gin_search_paths=" in err and "outside the repository" in err
