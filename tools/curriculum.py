"""`pretrain experiment curriculum`: Which curriculum?"""

import sys

from pretrain import cli

if __name__ == "__main__":
  sys.exit(cli.main(["experiment", "curriculum", *sys.argv[1:]]))
