"""`pretrain estimate-memory` as a script (pip install -e . first): python tools/estimate_memory.py --help"""

import sys

from pretrain import cli

if __name__ == "__main__":
  sys.exit(cli.main(["estimate-memory", *sys.argv[1:]]))
