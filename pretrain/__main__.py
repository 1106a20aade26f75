"""python -m pretrain SUBCOMMAND ...: the same as the `pretrain` console script."""

import sys

from pretrain import cli

sys.exit(cli.main())
