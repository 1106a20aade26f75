"""Time to the first batch when resuming deep into the stream: the command line of pretrain.bench.resume_time
(see --help)."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from pretrain.bench import resume_time  # pylint: disable=g-import-not-at-top

if __name__ == "__main__":
  sys.exit(resume_time.main(sys.argv[1:]))
