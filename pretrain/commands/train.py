"""Pre-trains a model from a config, or resumes the workdir's run from its latest checkpoint.

  pretrain train --workdir=DIR [--config=quickstart] [--gin_file=FILE] [--config.KEY=VALUE ...]

SIGTERM or Ctrl-C saves a checkpoint at the current step and stops (exit
128 + the signal); rerunning the same command resumes. A cooldown branch's
workdir (pretrain cooldown) resumes with its own config.json, and
--config.KEY=VALUE overrides of it.
"""

import argparse
import copy
import os
import sys

from pretrain import cli, config as config_lib
from pretrain.parallel import distributed
from pretrain.system.errors import UserError, exit_on_user_error


def train(cfg, workdir: str) -> dict:
  """Builds the run of `cfg` in `workdir` and trains it. Nothing in the workdir changes until every check
  (the config, the model against the workdir's, the checkpoint's shapes) and the restore have passed."""
  import jax  # pylint: disable=g-import-not-at-top
  from pretrain import hf, run as run_lib, workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from pretrain.system.console import log  # pylint: disable=g-import-not-at-top
  from pretrain.train import checkpoint, goodput, loop, memory  # pylint: disable=g-import-not-at-top
  from pretrain.workdir import branch  # pylint: disable=g-import-not-at-top
  from pretrain.workdir.lock import WorkdirLock  # pylint: disable=g-import-not-at-top
  cfg = hf.init_config(cfg, run_lib.objective(cfg).family)
  workdir_lib.check_writable(workdir)
  workdir_lib.check_layout(workdir)
  with WorkdirLock(workdir):
    workdir_lib.check_same_model(cfg, workdir)
    run = run_lib.Run.build_with_data(cfg)
    memory.check_fits(run)
    ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), cfg.train.keep_checkpoints,
                                   keep_steps=cfg.train.keep_steps)
    start = ckpt.latest_step()
    # The run's time so far, if goodput.json is its account (the run id its checkpoints record says so).
    account = goodput.Goodput(workdir, write=jax.process_index() == 0,
                              run=ckpt.run_id(start) if start is not None else None, checkpointed=start is not None)
    ckpt.records = {"run": account.run, "config": run.cfg.to_dict(),
                    "vocabulary": workdir_lib.file_sha256(run.vocabulary.file)}
    branching = start is None and bool(cfg.train.parent)  # A cooldown branch's first start.
    if branching:
      account.mark("startup")
      state, position, guard = branch.restore_parent(run, cfg)
      start = cfg.train.parent_step
      account.mark("checkpoint")
    elif start is None:
      state, start, position = hf.initial_state(run), 0, None
      account.mark("startup")
    else:
      account.mark("startup")
      state = run.restore(ckpt, start, f"the checkpoint of step {start} in {workdir!r}")
      account.mark("checkpoint")
      position = ckpt.restore_data(start)
      if position is None:
        raise UserError(f"the latest checkpoint in {workdir!r} has no data position (written by an older "
                        "version); start a new workdir")
    extra_eval = None
    if cfg.train.harness_tasks:  # lm-eval's tasks during training, checked before any step.
      from pretrain.commands import lm_eval  # pylint: disable=g-import-not-at-top
      from pretrain.system import data_cache  # pylint: disable=g-import-not-at-top
      extra_eval = lm_eval.load().InLoop(run, data_cache.cache_dir(cfg.data))
    train_batches = run.train_batches(position, start)
    workdir_lib.write_run_files(run, workdir)
    account.resumed(start)
    if branching:  # Its own first checkpoint: from here on it resumes without its parent.
      log(f"Branching from the checkpoint of step {start} in {cfg.train.parent}: {cfg.train.steps - start} steps "
          f"of {cfg.optimizer.decay_shape} decay to {cfg.optimizer.end_lr_ratio:g} x optimizer.learning_rate")
      ckpt.save(start, state, train_batches.position(), guard)
      ckpt.wait()
      account.mark("checkpoint")
      account.saved(start)
    return loop.train(run, workdir, ckpt, state, start, train_batches, account, extra_eval,
                      initial_state=lambda: hf.initial_state(run))


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain train") -> int:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--workdir", required=True, help="where checkpoints, metrics and plots go")
  distributed.add_flags(parser)
  saved = branch_config(argv)
  if saved is None:
    args, cfg = cli.parse_command_line(parser, argv)
    if cfg.train.parent:  # A branch set up by hand: the checks pretrain cooldown makes.
      from pretrain.workdir import branch  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
      branch.check_made(cfg)
  else:
    args, cfg = branch_command_line(parser, argv, saved)
  distributed.initialize(args)
  summary = train(cfg, args.workdir)
  return 128 + summary["stopped_by"] if summary.get("stopped_by") else 0


def branch_config(argv: list[str]):
  """The saved config of the cooldown branch that --workdir holds, None where it holds none."""
  peek = argparse.ArgumentParser(add_help=False)  # The workdir alone: --help is the command's.
  peek.add_argument("--workdir", help="the workdir, read before the other flags")
  workdir = peek.parse_known_args(argv)[0].workdir
  if not workdir:
    return None
  from pretrain.workdir import branch  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
  return branch.saved(workdir)


def branch_command_line(parser, argv: list[str], saved):
  """(args, config) of a command that resumes a cooldown branch: its saved config, with the --config.KEY=VALUE
  overrides among `argv` (a config file or gin file would make another run)."""
  overrides, flags = config_lib.parse_overrides(argv)
  another = [flag for flag in flags if flag.split("=")[0] in ("--config", "--gin_file") or flag.startswith("--gin.")]
  if another:
    raise UserError(f"the workdir holds a cooldown branch of {saved.train.parent!r}, which resumes with its own "
                    f"config.json; drop {another[0]} (--config.KEY=VALUE overrides still apply)")
  from pretrain.workdir import branch  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
  cfg = cli.with_overrides(copy.deepcopy(saved), overrides)  # It sets the fields in place.
  branch.check_fields(cfg, saved, "is given on the branch's resume")
  return parser.parse_args(flags), cfg


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
