"""`pretrain experiment compare_moe`: Dense or mixture of experts?"""

import sys

from pretrain import cli

if __name__ == "__main__":
  sys.exit(cli.main(["experiment", "compare_moe", *sys.argv[1:]]))
