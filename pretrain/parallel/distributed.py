"""Joining a multi-process run (several hosts, or several processes on one) with jax.distributed.

Every process runs the same command. The coordinator is given by flags, or
found by JAX itself on a multi-host TPU VM slice or under SLURM.

A lost process (killed, out of memory, its host gone) ends the others, each with
one line naming it (lost_process.py), found by JAX's coordination service: within
--heartbeat_timeout_seconds, or at once when the coordinator's process dies.
"""

import os

import jax

from pretrain.config import flags
from pretrain.parallel import lost_process
from pretrain.system.errors import UserError

# JAX's default is 100 s. A minute still rides out a network blip or a host's pause (heartbeats come from a
# native thread, so a busy or compiling process keeps sending them) and ends a job that lost a host twice as soon.
HEARTBEAT_TIMEOUT_SECONDS = 60


def add_flags(parser) -> None:
  group = parser.add_argument_group("multi-process runs (TPU VM slices and SLURM are detected without them)")
  group.add_argument("--coordinator_address", help="HOST:PORT of process 0, reachable from every process")
  group.add_argument("--num_processes", type=flags.at_least(1), help="how many processes take part")
  group.add_argument("--process_id", type=flags.at_least(0), help="this process's index, 0 .. num_processes - 1")
  group.add_argument("--heartbeat_timeout_seconds", type=flags.at_least(1), default=HEARTBEAT_TIMEOUT_SECONDS,
                     help="a process silent this long is lost, and the others end, naming it (default: "
                          "%(default)s; a lost coordinator process ends them at once)")


def _on_cluster() -> bool:
  slurm = int(os.environ.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in os.environ
  tpu_slice = "," in os.environ.get("TPU_WORKER_HOSTNAMES", "")  # More than one host.
  return slurm or tpu_slice


def initialize(args) -> None:
  """Calls jax.distributed.initialize when the flags or the environment ask for several processes."""
  given = {"--coordinator_address": args.coordinator_address, "--num_processes": args.num_processes,
           "--process_id": args.process_id}
  if any(v is not None for v in given.values()):
    missing = [k for k, v in given.items() if v is None]
    if missing:
      raise UserError(f"{', '.join(missing)} missing: a multi-process run needs --coordinator_address, "
                      "--num_processes and --process_id together")
    if not 0 <= args.process_id < args.num_processes:
      raise UserError(f"--process_id={args.process_id} is not in 0 .. {args.num_processes - 1}")
  elif not _on_cluster():
    return
  if args.coordinator_address is not None:
    # Processes on CPUs exchange arrays over gloo (TCP); GPUs and TPUs use their own collectives.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(args.coordinator_address, args.num_processes, args.process_id,
                             heartbeat_timeout_seconds=args.heartbeat_timeout_seconds)
  state = jax._src.distributed.global_state  # pylint: disable=protected-access  (the backend is not started yet)
  lost_process.start(state.process_id, state.num_processes, verbose=getattr(args, "verbose", False))


def exit_code(train, *args) -> int:
  """train(*args)'s exit code as a training command's: 0, or 128 + the signal that stopped the run. The processes
  of a run that stops, or fails alike on every process (UserError.every_process: a NaN loss, a refused workdir),
  leave together first (jax.distributed.shutdown's barrier): cli.entry ends a failed command with os._exit, which
  skips JAX's own shutdown at exit, and the coordinator's process gone first would abort the others, its report
  of a lost process in place of their own line."""
  try:
    summary = train(*args)
  except UserError as e:
    if e.every_process:
      _leave_together()
    raise
  if not summary.get("stopped_by"):
    return 0
  _leave_together()  # They agreed on the stop (StopRequest.agreed), so all of them come here.
  return 128 + summary["stopped_by"]


def _leave_together() -> None:
  if jax.process_count() > 1:
    jax.distributed.shutdown()
