"""python -m pretrain SUBCOMMAND ...: the same as the `pretrain` console script, whose entry is entry()."""

import signal


def entry() -> None:
  """cli.entry, with Ctrl-C ending the process at once from before the imports (seconds on a loaded machine) on,
  as it does later (cli.entry says why); an interrupt inside them was a KeyboardInterrupt's traceback."""
  if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
  from pretrain import cli  # pylint: disable=g-import-not-at-top  (after the signal's disposition is set)
  cli.entry()


if __name__ == "__main__":
  entry()
