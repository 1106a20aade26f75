"""`pretrain experiment mup_transfer`: Does the best learning rate hold still across widths?"""

import sys

from pretrain import cli

if __name__ == "__main__":
  sys.exit(cli.main(["experiment", "mup_transfer", *sys.argv[1:]]))
