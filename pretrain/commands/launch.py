"""Commands that start a run on a cluster: a TPU VM slice (gcloud) or SLURM (an sbatch script).

  pretrain launch tpu-vm --name=NAME --zone=ZONE --accelerator_type=v4-32 --workdir=gs://BUCKET/run [--run]
  pretrain launch slurm --nodes=2 --gpus_per_node=8 --workdir=DIR [--out=job.sh [--run]]

Both start `python -m pretrain train` once per host with the same config and
overrides; pretrain/parallel/distributed.py joins the processes with
jax.distributed. Nothing runs without --run: the commands or the script are
printed to be read first.
"""

import argparse
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tempfile

from pretrain import cli
from pretrain.parallel import tpu
from pretrain.parallel.tpu import ACCEPTED, TpuSlice, tpu_slice
from pretrain.system import files
from pretrain.system.errors import UserError, exit_on_user_error

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REMOTE_DIR = "pretrain"  # On each TPU VM worker, under the home directory.
# TPU VM images are Ubuntu 22.04 with Python 3.10, older than JAX and setup.py accept; uv installs this one.
DEFAULT_PYTHON = "3.12"
_FALLBACK_JAX_PIN = ">=0.10,<0.11"


def _jax_pin() -> str:
  """The jax version range of setup.py, so the TPU hosts install the JAX this code is written for."""
  try:
    with open(os.path.join(REPO, "setup.py")) as f:
      match = re.search(r"""["']jax\s*([<>=!~][^"']*)["']""", f.read())
  except OSError:
    match = None
  return match[1].replace(" ", "") if match else _FALLBACK_JAX_PIN


def _split_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
  """Separates the --config.KEY=VALUE and --gin.KEY=VALUE overrides, passed to the trainer verbatim."""
  overrides, rest = [], []
  for arg in argv:
    (overrides if arg.startswith(("--config.", "--gin.")) else rest).append(arg)
  for arg in overrides:
    if "=" not in arg:
      raise UserError(f"{arg} has no value; write {arg}=VALUE (with =) so it reaches every host as one argument")
  return overrides, rest


def _in_repo(path: str, flag: str, inside: bool, exists=os.path.isfile) -> str:
  """A file (or, with exists=os.path.isdir, a folder) the hosts read, as they see it: relative to the repository
  they run in (absolute if outside)."""
  for candidate in (os.path.abspath(path), os.path.join(REPO, path)):
    if exists(candidate):
      break
  else:
    raise UserError(f"{flag}={path} does not exist (relative paths are looked up from the current directory, "
                    f"then from the repository {REPO})")
  relative = os.path.relpath(os.path.realpath(candidate), os.path.realpath(REPO))
  if not relative.startswith(".."):
    return relative
  if inside:
    raise UserError(f"{flag}={path} is outside the repository {REPO}, and only the repository is copied to the "
                    "hosts; move the file into it (e.g. configs/)")
  return os.path.realpath(candidate)


def _config_file(path: str, flag: str, inside: bool, kind: str = "py") -> str:
  """A built-in config's name as it is (the hosts' package has it), else the file as the hosts see it."""
  from pretrain import configs  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
  return path if configs.path(path, kind) != path else _in_repo(path, flag, inside)


def _check_config(config: str, gin_files: list[str], search_paths: list[str], overrides: list[str]):
  """Resolves the config as the trainer will, so a mistyped key fails here and not on every host."""
  from pretrain import configs  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
  local = lambda path, kind: path if configs.path(path, kind) != path else os.path.join(REPO, path)
  argv = [f"--config={local(config, 'py')}", *(f"--gin_file={local(g, 'gin')}" for g in gin_files),
          *_search_flag([os.path.join(REPO, p) for p in search_paths])]
  return cli.parse_command_line(argparse.ArgumentParser(), argv + overrides)[1]


def _search_flag(paths: list[str]) -> list[str]:
  return [f"--gin_search_paths={','.join(paths)}"] if paths else []


def _branch_config(args, overrides: list[str]):
  """The config that a cooldown branch in a local --workdir resumes with (its own, with the overrides), or None:
  `pretrain train` refuses --config and gin files for a branch. (A gs:// workdir is not read from here.)"""
  from pretrain import configs, config as config_lib  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
  from pretrain.workdir import branch  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
  saved = branch.saved(args.workdir) if os.path.isdir(args.workdir) else None
  if saved is None:
    return None
  if args.config != configs.DEFAULT or args.gin_file:
    raise UserError(f"--workdir={args.workdir} holds a cooldown branch of {saved.train.parent!r}, which resumes with "
                    "its own config; drop --config and --gin_file (--config.KEY=VALUE overrides still apply)")
  return cli.with_overrides(saved, config_lib.parse_overrides(overrides)[0])


def _train_args(args, overrides: list[str], inside: bool):
  """(The trainer's flags, the same on every host: config, gin files, workdir, overrides (a cooldown branch's
  workdir: no config or gin files); the config they resolve to, checked)."""
  branch_config = _branch_config(args, overrides)
  if branch_config is not None:
    return [f"--workdir={args.workdir}", *overrides], branch_config
  config = _config_file(args.config, "--config", inside)
  gin_files = [_config_file(g, "--gin_file", inside, "gin") for g in args.gin_file]
  search_paths = [_in_repo(p, "--gin_search_paths", inside, os.path.isdir)
                  for p in args.gin_search_paths.split(",") if p]
  cfg = _check_config(config, gin_files, search_paths, overrides)
  return [f"--config={config}", *(f"--gin_file={g}" for g in gin_files), *_search_flag(search_paths),
          f"--workdir={args.workdir}", *overrides], cfg


def _add_train_flags(parser, run_help: str, config_help: str) -> None:
  group = parser.add_argument_group("the run (passed to `python -m pretrain train` on every host)")
  group.add_argument("--workdir", required=True, help="where checkpoints, metrics and plots go; every host writes "
                     "to it, so it must be one place they all reach")
  group.add_argument("--config", default="quickstart",
                     help=f"a built-in config's name or an ml_collections config file{config_help} (default: "
                          "%(default)s)")
  group.add_argument("--gin_file", action="append", default=[],
                     help="gin file of SECTION.FIELD = value bindings over --config (repeatable)")
  group.add_argument("--gin_search_paths", default="",
                     help="comma-separated folders where a gin include's relative path is also looked for (as "
                          "`pretrain train` takes it)")
  group.add_argument("--run", action="store_true", help=run_help)


# TPU VM slices.


def tpu_vm_commands(args, train_args: list[str]) -> tuple[TpuSlice, list[list[str]]]:
  """The slice, and the commands that (create,) copy, install and start the run on every worker."""
  tpu = tpu_slice(args.accelerator_type)
  if tpu.hosts > 1 and not args.workdir.startswith("gs://") and not args.allow_local_workdir:
    raise UserError(f"--workdir={args.workdir} is a local path, but the {tpu.hosts} hosts of a {tpu.accelerator_type} "
                    "slice must write checkpoints and metrics to one shared place: use a Cloud Storage bucket, "
                    "--workdir=gs://BUCKET/RUN (or --allow_local_workdir if every host mounts that path)")
  if not os.path.exists(os.path.join(REPO, ".git")):  # A worktree's .git is a file.
    raise UserError(f"{REPO} is not a git checkout; launch tpu-vm copies the files git knows of, so run it from "
                    "a clone of the repository")
  gcloud = ["gcloud", "compute", "tpus", "tpu-vm"]
  where = [f"--zone={args.zone}"] + ([f"--project={args.project}"] if args.project else [])
  commands = []
  if args.create:
    commands.append([*gcloud, "create", args.name, *where, f"--accelerator-type={tpu.accelerator_type}",
                     f"--version={args.version or tpu.runtime}"])
  tarball = args.tarball or os.path.join(tempfile.gettempdir(), f"pretrain-{args.name}.tar.gz")
  # The tracked files and the untracked ones .gitignore keeps (new configs): not .venv, runs/ or caches.
  pack = (f"set -o pipefail; git -C {shlex.quote(REPO)} ls-files -z --cached --others --exclude-standard | "
          f"tar --create --gzip --file={shlex.quote(tarball)} --directory={shlex.quote(REPO)} --null --files-from=- "
          "--ignore-failed-read")
  commands.append(["bash", "-c", pack])
  commands.append([*gcloud, "scp", tarball, f"{args.name}:{REMOTE_DIR}.tar.gz", *where, "--worker=all"])
  install = (f"mkdir -p ~/{REMOTE_DIR} && tar -xzf ~/{REMOTE_DIR}.tar.gz -C ~/{REMOTE_DIR} && cd ~/{REMOTE_DIR} && "
             'export PATH="$HOME/.local/bin:$PATH" && '
             "{ command -v uv >/dev/null || python3 -m pip install --user uv; } && "
             f"uv venv --allow-existing --python {shlex.quote(args.python)} .venv && "
             f"uv pip install --python .venv/bin/python -e . {shlex.quote('jax[tpu]' + _jax_pin())}")
  commands.append([*gcloud, "ssh", args.name, *where, "--worker=all", f"--command={install}"])
  train = f"cd ~/{REMOTE_DIR} && " + shlex.join([".venv/bin/python", "-m", "pretrain", "train", *train_args])
  commands.append([*gcloud, "ssh", args.name, *where, "--worker=all", f"--command={train}"])
  return tpu, commands


def _check_mesh(cfg, devices: int, where: str) -> None:
  """Refuses a mesh that does not cover the job's devices here, not once the job has started on every host."""
  from pretrain.parallel import mesh as mesh_lib  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
  try:
    mesh_lib.mesh_shape(cfg.mesh, devices)
  except UserError as e:
    raise UserError(f"{where}: {e}") from None


def _compile_check(args, cfg) -> None:
  """Compiles the run of `cfg` for the slice's topology (pretrain compile) and refuses one that does not fit or
  compile."""
  from pretrain.commands import compile as compile_lib  # pylint: disable=g-import-not-at-top  (JAX)
  if args.accelerator_type.startswith(("v2-", "v3-")):
    print(f"# {args.accelerator_type}: not compiled first (libtpu compiles for v4 and newer)", flush=True)
    return
  if importlib.util.find_spec("libtpu") is None:
    raise UserError(f"launch tpu-vm compiles the run for the {args.accelerator_type} slice first, which needs "
                    "libtpu: pip install -e '.[tpu]' (it runs nothing here), or pass --no_compile_check")
  facts = compile_lib.check(cfg, tpu.target(args.accelerator_type))
  if not facts["fits"]:
    raise UserError(f"{facts['target']}: the step needs {facts['total'] / 2**30:,.1f} GiB per device, over the "
                    f"chip's {facts['hbm'] / 2**30:,.0f} GiB (pretrain compile --topology={args.accelerator_type} "
                    "shows where it goes); raise train.microbatches, set model.remat=full or shard over more chips, "
                    "or pass --no_compile_check")
  print(f"# compiled for {facts['target']}: {facts['total'] / 2**30:,.1f} GiB of {facts['hbm'] / 2**30:,.0f} GiB "
        f"per device; MFU at most {facts['mfu_bound']:.0%} (roofline)", flush=True)


def _tpu_vm(args, overrides: list[str]) -> int:
  train_args, cfg = _train_args(args, overrides, inside=True)
  tpu, commands = tpu_vm_commands(args, train_args)
  _check_mesh(cfg, tpu.devices, tpu.accelerator_type)
  if not args.no_compile_check:
    _compile_check(args, cfg)
  joined = "; every host runs the trainer, and jax.distributed finds the others itself" if tpu.hosts > 1 else ""
  print(f"# {tpu.accelerator_type}: {tpu.hosts} host{'s' if tpu.hosts > 1 else ''}, {tpu.devices} JAX devices "
        f"({tpu.chips} chips){joined}", flush=True)
  for command in commands:
    print(shlex.join(command), flush=True)
    if args.run:
      try:
        code = subprocess.run(command, check=False).returncode
      except FileNotFoundError:
        raise UserError(f"{command[0]} is not on the PATH; install the Google Cloud CLI (gcloud), or run without "
                        "--run and start the commands where it is") from None
      if code:
        print(f"# failed with exit code {code}; stopped", file=sys.stderr, flush=True)
        return code
  return 0


# SLURM.


def slurm_script(args, train_args: list[str], argv: list[str]) -> str:
  """An sbatch script: one task per node owning all its GPUs, process 0's node as the coordinator."""
  sbatch = {"job-name": args.job_name, "nodes": args.nodes, "ntasks-per-node": 1, "gpus-per-node": args.gpus_per_node,
            "cpus-per-task": args.cpus_per_task, "time": args.time, "partition": args.partition,
            "account": args.account, "chdir": REPO, "output": args.log}
  lines = ["#!/bin/bash", f"# Written by: {args.prog} {shlex.join(argv)}"]
  lines += [f"#SBATCH --{key}={value}" for key, value in sbatch.items() if value is not None]
  lines += ["set -euo pipefail", f"cd {shlex.quote(REPO)}"]
  if args.venv != "none":
    lines.append(f"source {shlex.quote(os.path.join(args.venv, 'bin', 'activate'))}")
  lines += [*args.setup, "export PYTHONUNBUFFERED=1"]
  # A fixed port would clash between two jobs whose first node is the same; the job id spreads them.
  port = str(args.port) if args.port else "$((29500 + SLURM_JOB_ID % 1000))"
  lines += ['COORDINATOR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p):' + port + '"',
            "export COORDINATOR",
            "# The single quotes leave $SLURM_PROCID to each task's own shell: expanded here, every task would be 0."]
  srun = ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--label"]
  if args.cpus_per_task:  # Since Slurm 22.05, srun no longer takes --cpus-per-task from the allocation.
    srun.append(f"--cpus-per-task={args.cpus_per_task}")
  task = ('echo "pretrain: process $SLURM_PROCID of $SLURM_NTASKS on $(hostname), coordinator $COORDINATOR" >&2; '
          'exec "$@" --coordinator_address="$COORDINATOR" --num_processes="$SLURM_NTASKS" '
          '--process_id="$SLURM_PROCID"')
  train = [shlex.join(["python", "-m", "pretrain", "train"]), *map(shlex.quote, train_args)]
  lines.append(" \\\n    ".join([shlex.join([*srun, "bash", "-c", task, "bash"]), *train]))
  return "\n".join(lines) + "\n"


def _slurm(args, overrides: list[str], argv: list[str]) -> int:
  if args.time is not None and not re.fullmatch(r"(\d+-)?\d+(:\d+){0,2}", args.time):
    raise UserError(f"--time={args.time} is not a Slurm time limit; write MINUTES, HH:MM:SS or DAYS-HH:MM:SS")
  if args.run and not args.out:
    raise UserError("--run submits the script with sbatch, which needs it in a file: add --out=FILE")
  if not 0 <= args.port < 65536:
    raise UserError(f"--port={args.port} is not a TCP port; use 1024 .. 65535, or 0 to derive it from the job id")
  if args.venv != "none":
    args.venv = os.path.abspath(args.venv)
    if not os.path.isfile(os.path.join(args.venv, "bin", "activate")):
      raise UserError(f"--venv={args.venv} has no bin/activate; create it (make train, or python3 -m venv) with "
                      "jax[cuda12] installed, or pass --venv=none to use the job's own environment (see --setup)")
  if "://" not in args.workdir:
    args.workdir = os.path.abspath(args.workdir)  # The job runs in the repository, not where this ran.
  args.log = os.path.abspath(args.log)
  train_args, cfg = _train_args(args, overrides, inside=False)
  _check_mesh(cfg, args.nodes * args.gpus_per_node, f"{args.nodes} nodes x {args.gpus_per_node} GPUs")
  script = slurm_script(args, train_args, argv)
  if "%" not in os.path.dirname(args.log):
    os.makedirs(os.path.dirname(args.log), exist_ok=True)  # Slurm does not create it, and fails the job without.
  if not args.out:
    sys.stdout.write(script)
    return 0
  files.write_atomically(args.out, script.encode())  # Its missing folders made.
  os.chmod(args.out, 0o755)
  print(f"Wrote {args.out}; submit it with: sbatch {shlex.quote(args.out)}", flush=True)
  if not args.run:
    return 0
  try:
    return subprocess.run(["sbatch", args.out], check=False).returncode
  except FileNotFoundError:
    raise UserError("sbatch is not on the PATH; run this on the cluster's login node, or submit the script "
                    "there") from None


# The command line.


def _parser(prog: str) -> argparse.ArgumentParser:
  parser = cli.parser_for(prog, __doc__, allow_abbrev=False)
  sub = parser.add_subparsers(dest="command", required=True, metavar="{tpu-vm,slurm}")
  overrides = ("Any config field can be set with --config.SECTION.FIELD=VALUE (or --gin.SECTION.FIELD=VALUE); "
               "they are checked here and passed to every host verbatim.")

  tpu = sub.add_parser(
      "tpu-vm", allow_abbrev=False, help="print (or --run) the gcloud commands for a Cloud TPU VM slice",
      description="Prints the commands that (with --create, create the TPU VM,) pack the repository, copy it to "
      f"every worker, install it there with TPU JAX (jax[tpu]{_jax_pin()}, in ~/{REMOTE_DIR}/.venv) and start the "
      "trainer on all workers at once. A multi-host slice needs no coordinator flags: JAX finds the other hosts "
      "(TPU_WORKER_HOSTNAMES). The training runs while the last ssh command does; start it from a session that "
      "stays up (tmux, screen).", epilog=overrides)
  group = tpu.add_argument_group("the TPU VM")
  group.add_argument("--name", required=True, help="name of the TPU VM (the slice)")
  group.add_argument("--zone", required=True, help="its zone, e.g. us-central2-b")
  group.add_argument("--accelerator_type", required=True, help=f"its type: {ACCEPTED}")
  group.add_argument("--project", help="Google Cloud project (default: gcloud's configured one)")
  group.add_argument("--create", action="store_true", help="create the TPU VM first")
  group.add_argument("--version", help="TPU software version for --create (default: the one Cloud TPU documents for "
                     "JAX on that generation: tpu-ubuntu2204-base up to v4, v2-alpha-tpuv5 for v5p, "
                     "v2-alpha-tpuv5-lite for v5litepod, v2-alpha-tpuv6e for v6e)")
  group.add_argument("--python", default=DEFAULT_PYTHON, help="Python version uv installs on the workers "
                     "(default: %(default)s; the images' own Python 3.10 is older than JAX supports)")
  group.add_argument("--tarball", help="where to pack the repository before copying it (default: "
                     f"{os.path.join(tempfile.gettempdir(), 'pretrain-NAME.tar.gz')})")
  group.add_argument("--no_compile_check", action="store_true",
                     help="start without compiling the run for the slice's topology first (the check needs libtpu: "
                          "pip install -e '.[tpu]')")
  group.add_argument("--allow_local_workdir", action="store_true",
                     help="accept a --workdir that is not gs:// on a multi-host slice (a disk every host mounts)")
  _add_train_flags(tpu, "run the printed commands, in order, stopping at the first that fails (default: only "
                   "print them)", ", inside the repository (what the workers get)")

  slurm = sub.add_parser(
      "slurm", allow_abbrev=False, help="write (or --run with sbatch) a batch script for a SLURM GPU cluster",
      description="Writes an sbatch script that starts one process per node, owning all that node's GPUs, joined "
      "by jax.distributed with the first node as the coordinator. Run it on the cluster's login node: the script "
      "uses this repository and virtual environment, which must be on a file system the nodes share; the "
      "environment needs JAX for GPUs (pip install 'jax[cuda12]').", epilog=overrides)
  group = slurm.add_argument_group("the job")
  group.add_argument("--nodes", type=cli.at_least(1), required=True, help="nodes (hosts), one training process each")
  group.add_argument("--gpus_per_node", type=cli.at_least(1), required=True, help="GPUs of each node the process uses")
  group.add_argument("--cpus_per_task", type=cli.at_least(1), help="CPU cores of each process (default: the cluster's)")
  group.add_argument("--time", help="time limit, HH:MM:SS or DAYS-HH:MM:SS (default: the partition's)")
  group.add_argument("--partition", help="partition (queue) to submit to (default: the cluster's)")
  group.add_argument("--account", help="account to charge (default: yours)")
  group.add_argument("--job_name", default="pretrain", help="job name (default: %(default)s)")
  group.add_argument("--port", type=cli.at_least(0, 65535), default=0,
                     help="coordinator port on the first node (default: 29500 plus the job id modulo 1000, so jobs "
                          "sharing a node do not collide)")
  group.add_argument("--venv", default=os.path.join(REPO, ".venv"),
                     help="virtual environment the job activates, or 'none' (default: %(default)s)")
  group.add_argument("--setup", action="append", default=[],
                     help="a shell line run before training, e.g. --setup='module load cuda' (repeatable)")
  group.add_argument("--log", default=os.path.join(REPO, "runs", "slurm-%x-%j.out"),
                     help="the job's output file, %%x the job name and %%j its id (default: %(default)s)")
  group.add_argument("--out", type=cli.output_file, help="write the script to this file (default: print it)")
  _add_train_flags(slurm, "submit the written script with sbatch (needs --out; default: only write it)", "")
  return parser


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain launch") -> int:
  overrides, rest = _split_overrides(argv)
  args = _parser(prog).parse_args(rest)
  args.prog = prog
  if args.command == "tpu-vm":
    return _tpu_vm(args, overrides)
  return _slurm(args, overrides, argv)


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
