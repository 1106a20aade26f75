"""`pretrain experiment ptb`: Penn Treebank: the published numbers reproduced"""

import sys

from pretrain import cli

if __name__ == "__main__":
  sys.exit(cli.main(["experiment", "ptb", *sys.argv[1:]]))
