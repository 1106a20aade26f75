"""`pretrain experiment data_quality`: Data quality"""

import sys

from pretrain import cli

if __name__ == "__main__":
  sys.exit(cli.main(["experiment", "data_quality", *sys.argv[1:]]))
