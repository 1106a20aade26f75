"""`pretrain experiment cooldown_check`: Does a cooldown from a stable run reach a fresh cosine run?"""

import sys

from pretrain import cli

if __name__ == "__main__":
  sys.exit(cli.main(["experiment", "cooldown_check", *sys.argv[1:]]))
