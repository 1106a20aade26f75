"""`pretrain experiment exercises`: The seed's exercises, each a pretrain sweep"""

import sys

from pretrain import cli

if __name__ == "__main__":
  sys.exit(cli.main(["experiment", "exercises", *sys.argv[1:]]))
