"""Cooldown branches in the experiments: each trained once by `pretrain cooldown`, read back when finished.

A branch's workdir holds its own run (config.json names the parent and the step), so a rerun of an experiment
skips a finished branch, resumes an interrupted one from its own checkpoint, and refuses a directory that holds
another run (pretrain/workdir/branch.py).
"""

import os
import shlex

from pretrain import run as run_lib
from pretrain.commands import cooldown as cooldown_command
from pretrain.experiments import runs, sweep_report
from pretrain.system.errors import UserError


def cooldown(parent: str, start: int, decay: int, out: str, flags: list[str]) -> dict:
  """runs.measure() of the branch of the run in `parent` from its checkpoint of step `start`, decaying over `decay`
  steps in `out` (`flags`: other --config.KEY=VALUE overrides of the branch, e.g. its decay's shape); trained
  unless finished, its console output in OUT/train.log."""
  if sweep_report.final_record(out, start + decay) is None:
    os.makedirs(out, exist_ok=True)
    with runs.output_to(os.path.join(out, "train.log")):
      stopped = cooldown_command.main.__wrapped__([f"--workdir={parent}", f"--from_step={start}", f"--steps={decay}",
                                          f"--out={out}", *flags])
    if stopped:
      raise UserError(f"the branch in {out} was interrupted; rerun the command to continue")
  return runs.measure(run_lib.Run.build_with_data(run_lib.saved_config(out)), out, float("nan"))


def command(parent: str, start: int, decay: int, out: str, flags: list[str]) -> str:
  """The `pretrain cooldown` command line of a branch, for a report."""
  return shlex.join(["pretrain", "cooldown", f"--workdir={parent}", f"--from_step={start}", f"--steps={decay}",
                   f"--out={out}", *flags])
