"""python -m pretrain.train --config=configs/quickstart.py --workdir=DIR [--config.KEY=VALUE ...]"""

import argparse
import os
import sys

# Keep TensorFlow's C++ logging to errors; it only reads input data here.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pretrain import config as config_lib  # pylint: disable=g-import-not-at-top
from pretrain.errors import UserError, exit_on_user_error  # pylint: disable=g-import-not-at-top


def parse(argv: list[str]):
  parser = argparse.ArgumentParser(
      prog="python -m pretrain.train", description=__doc__,
      epilog="Any config field can be set with --config.SECTION.FIELD=VALUE, e.g. --config.train.steps=100.")
  parser.add_argument("--config", default="configs/quickstart.py", help="ml_collections config file")
  parser.add_argument("--workdir", required=True, help="where checkpoints, metrics and plots go")
  args, rest = parser.parse_known_args(argv)
  cfg = config_lib.load_config_file(args.config)
  rest = config_lib.apply_overrides(cfg, rest)
  if rest:
    raise UserError(f"unknown arguments {rest}; flags are --config, --workdir and --config.KEY=VALUE")
  return cfg, args.workdir


@exit_on_user_error
def main(argv: list[str]) -> int:
  cfg, workdir = parse(argv)
  from pretrain.train import loop  # pylint: disable=g-import-not-at-top  (imports JAX and TF)
  summary = loop.train(cfg, workdir)
  return 128 + summary["stopped_by"] if summary.get("stopped_by") else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
