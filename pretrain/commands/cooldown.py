"""Starts a cooldown branch of a run: a new run in --out that continues --workdir's run from its checkpoint of
step --from_step and decays the learning rate to the end over --steps more steps.

  pretrain cooldown --workdir=RUN --from_step=S --steps=D --out=DIR [--config.KEY=VALUE ...]

RUN trains with optimizer.schedule=wsd, S lies in its stable phase, and RUN
keeps its checkpoint of S (train.keep_steps keeps branch points). The branch
is RUN's config with train.steps=S+D and optimizer.decay_steps=D: RUN's
parameters, optimizer state and data stream at S, then D steps of
optimizer.decay_shape decay to optimizer.end_lr_ratio x the peak.
--config.KEY=VALUE sets other fields (the decay's shape and end, evaluation,
checkpoints). Its config.json names the parent (train.parent,
train.parent_step). Rerunning the same command, or pretrain train
--workdir=DIR, resumes the branch; each branch of a run needs a directory of
its own.
"""

import sys

from pretrain import cli, config as config_lib
from pretrain.parallel import distributed
from pretrain.system.errors import UserError, exit_on_user_error


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain cooldown") -> int:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--workdir", type=cli.run_workdir, required=True, help="the parent: a run with schedule wsd")
  parser.add_argument("--from_step", type=cli.at_least(1), required=True,
                      help="S: the step of the parent's checkpoint that the branch continues")
  parser.add_argument("--steps", type=cli.at_least(1), required=True,
                      help="D: the steps of the decay, after S (the branch ends at step S + D)")
  parser.add_argument("--out", type=cli.output_dir, required=True, help="the branch's workdir")
  distributed.add_flags(parser)
  parser.epilog = ("Other config fields can be set with --config.SECTION.FIELD=VALUE, e.g. "
                   "--config.optimizer.decay_shape=linear.")
  overrides, flags = config_lib.parse_overrides(argv)
  args = parser.parse_args(flags)
  from pretrain import training  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
  # pylint: disable-next=g-import-not-at-top  (not for --help)
  from pretrain import workdir as workdir_lib
  from pretrain.workdir import branch  # pylint: disable=g-import-not-at-top  (not for --help)
  fixed = [key for key, _ in overrides if key in branch.SET_BY_BRANCH]
  if fixed:
    raise UserError(f"--config.{fixed[0]} is set by the branch (the parent's, with --from_step and --steps); "
                    "drop it")
  cfg = branch.existing(args.out, args.workdir, args.from_step, args.steps)
  distributed.initialize(args)  # Before branch.config opens the parent's checkpoints: that starts JAX's backend.
  if cfg is None:  # A new branch: its overrides may not change what the parent's checkpoint holds.
    cfg = cli.with_overrides(branch.config(args.workdir, args.from_step, args.steps), overrides)
    workdir_lib.check_same_model(cfg, args.workdir, "a branch continues its parent's parameters and optimizer "
                                                    "state: drop that override")
  else:
    cfg = cli.with_overrides(cfg, overrides)
  return distributed.exit_code(training.train, cfg, args.out)


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
