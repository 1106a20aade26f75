"""`pretrain experiment scaling`: How big a model for a compute budget?"""

import sys

from pretrain import cli

if __name__ == "__main__":
  sys.exit(cli.main(["experiment", "scaling", *sys.argv[1:]]))
