"""How big a model for a compute budget? The command line of pretrain.experiments.scaling (see --help)."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from pretrain.system import host_memory  # pylint: disable=g-import-not-at-top

host_memory.keep_freed_memory()  # Before JAX starts its threads.
from pretrain.experiments import scaling  # pylint: disable=g-import-not-at-top

if __name__ == "__main__":
  sys.exit(scaling.main(sys.argv[1:]))
