"""Input-pipeline throughput of each objective: the command line of pretrain.data.throughput (see --help)."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from pretrain.data import throughput  # pylint: disable=g-import-not-at-top

if __name__ == "__main__":
  sys.exit(throughput.main(sys.argv[1:]))
