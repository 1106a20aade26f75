"""python -m pretrain SUBCOMMAND ...: the same as the `pretrain` console script."""

from pretrain import cli

cli.entry()
