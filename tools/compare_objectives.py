"""`pretrain experiment compare_objectives`: Which objective?"""

import sys

from pretrain import cli

if __name__ == "__main__":
  sys.exit(cli.main(["experiment", "compare_objectives", *sys.argv[1:]]))
