"""Pre-trains a model from a config, or resumes the workdir's run from its latest checkpoint.

  pretrain train --workdir=DIR [--config=quickstart] [--gin_file=FILE] [--config.KEY=VALUE ...]

SIGTERM or Ctrl-C saves a checkpoint at the current step and stops (exit
128 + the signal); rerunning the same command resumes, as does
--config=DIR/config.json (every value the run trained with) where the command
is lost. A cooldown branch's workdir (pretrain cooldown) resumes with its own
config.json, and --config.KEY=VALUE overrides of it.
"""

import argparse
import copy
import sys

from pretrain import cli, config as config_lib
from pretrain.parallel import distributed
from pretrain.system.errors import UserError, exit_on_user_error


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain train") -> int:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--workdir", required=True, help="where checkpoints, metrics and plots go")
  distributed.add_flags(parser)
  saved = branch_config(argv)
  if saved is None:
    args, cfg = cli.parse_command_line(parser, argv)
  else:
    args, cfg = branch_command_line(parser, argv, saved)
  distributed.initialize(args)  # Before a parent's checkpoints are opened: that starts JAX's backend.
  if saved is None and cfg.train.parent:  # A branch set up by hand: the checks pretrain cooldown makes.
    from pretrain.workdir import branch  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
    branch.check_made(cfg)
  from pretrain import training  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
  return distributed.exit_code(training.train, cfg, args.workdir)


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
