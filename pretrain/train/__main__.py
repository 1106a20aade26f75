"""pretrain train --config=configs/quickstart.py --workdir=DIR [--config.KEY=VALUE ...] (or python -m pretrain.train)"""

import argparse
import os
import sys

# Keep TensorFlow's C++ logging to errors; it only reads input data here.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pretrain import command_line  # pylint: disable=g-import-not-at-top
from pretrain.errors import exit_on_user_error  # pylint: disable=g-import-not-at-top
from pretrain.parallel import distributed  # pylint: disable=g-import-not-at-top


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain train") -> int:
  parser = argparse.ArgumentParser(prog=prog, description=__doc__)
  parser.add_argument("--workdir", required=True, help="where checkpoints, metrics and plots go")
  distributed.add_flags(parser)
  args, cfg = command_line.parse_command_line(parser, argv)
  distributed.initialize(args)
  from pretrain.train import loop  # pylint: disable=g-import-not-at-top  (imports JAX and TF)
  summary = loop.train(cfg, args.workdir)
  return 128 + summary["stopped_by"] if summary.get("stopped_by") else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
