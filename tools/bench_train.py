"""`pretrain bench` as a script (pip install -e . first): python tools/bench_train.py --help"""

import sys

from pretrain import cli

if __name__ == "__main__":
  sys.exit(cli.main(["bench", *sys.argv[1:]]))
