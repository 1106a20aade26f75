"""User-facing errors: one clear line that names the problem and the fix."""

import functools
import sys


class UserError(Exception):
  """A mistake in the user's input (config, paths, data), not a bug in the code."""


def exit_on_user_error(main):
  """Wraps a command-line entry point: a UserError prints one line and exits 2."""

  @functools.wraps(main)
  def wrapped(*args, **kwargs):
    try:
      return main(*args, **kwargs)
    except UserError as e:
      print(f"error: {e}", file=sys.stderr)
      sys.exit(2)

  return wrapped
