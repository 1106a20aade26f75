"""Input-pipeline throughput of each objective: the command line of pretrain.bench.data_throughput (see --help)."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from pretrain.bench import data_throughput  # pylint: disable=g-import-not-at-top

if __name__ == "__main__":
  sys.exit(data_throughput.main(sys.argv[1:]))
