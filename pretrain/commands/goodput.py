"""Where a run's wall time went: productive steps, and the rest, across its restarts.

  pretrain goodput --workdir=runs/quickstart [--json]

Reads WORKDIR/goodput.json, which training rewrites at every logged step and
checkpoint (pretrain/train/goodput.py), so it reads a finished run or one that
is still training (as of its last logged step).
"""

import json
import os
import sys

from pretrain import cli
from pretrain.system.errors import UserError, exit_on_user_error


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain goodput") -> None:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--workdir", required=True, help="a run of pretrain train (it reads its goodput.json)")
  parser.add_argument("--json", action="store_true", help="print the summary as JSON")
  args = parser.parse_args(argv)

  from pretrain.train import checkpoint, goodput  # pylint: disable=g-import-not-at-top  (not for --help)

  record = goodput.read(args.workdir)
  if record is None:
    raise UserError(f"{args.workdir!r} has no {goodput.GOODPUT_FILE}; give the --workdir of a training run (runs "
                    "trained before goodput was accounted have none)")
  ours = checkpoint.recorded_run(os.path.join(args.workdir, "checkpoints"))
  if ours and record.get("run", ours) != ours:
    raise UserError(f"{os.path.join(args.workdir, goodput.GOODPUT_FILE)} is the account of another run (run "
                    f"{record['run']}; the checkpoints here are run {ours}'s); the run's next start moves it aside "
                    "and starts a new account")
  summary = goodput.summary(record)
  print(json.dumps(summary, indent=1) if args.json else goodput.table(summary))


if __name__ == "__main__":
  main(sys.argv[1:])
