"""The pretrain command line's subcommands, one module each (pretrain/cli.py dispatches to them)."""

import argparse


def parser_for(prog: str, doc: str, **kwargs) -> argparse.ArgumentParser:
  """A subcommand's flag parser, its module docstring as the help text."""
  return argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 **kwargs)
