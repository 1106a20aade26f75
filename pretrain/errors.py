"""User-facing errors: one clear line that names the problem and the fix."""

import functools
import sys


class UserError(Exception):
  """A mistake in the user's input (config, paths, data), not a bug in the code."""


def carried(error: Exception, what: str) -> UserError:
  """The one line of a failure raised in a library's worker thread (TensorFlow's data threads wrap a UserError
  in an error of their own, with its traceback): the UserError's message, or `what` failed and the library's
  first line."""
  message = getattr(error, "message", None) or str(error)
  for line in message.splitlines():
    if "UserError: " in line:
      return UserError(line.split("UserError: ", 1)[1])
  return UserError(f"{what} failed: {message.strip().splitlines()[0] if message.strip() else type(error).__name__}")


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
