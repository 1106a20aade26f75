"""`pretrain estimate-memory`, runnable from a checkout without installing: python tools/estimate_memory.py --help"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pretrain import cli  # pylint: disable=g-import-not-at-top

if __name__ == "__main__":
  sys.exit(cli.main(["estimate-memory", *sys.argv[1:]]))
