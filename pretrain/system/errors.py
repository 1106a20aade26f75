"""User-facing errors: one clear line that names the problem and the fix."""

import functools
import re
import sys


class UserError(Exception):
  """A mistake in the user's input (config, paths, data), not a bug in the code. The line names the problem, then
  what to do: `fix`, where it is given apart (a run's failure says how to change the settings and resume; a sweep,
  whose points cannot be rerun otherwise, says its own: pretrain/experiments/sweep.py)."""

  def __init__(self, problem: str, fix: str = "", every_process: bool = False):
    super().__init__(f"{problem}; {fix}" if fix else problem)
    self.problem, self.fix = problem, fix
    # Raised alike by every process of a run at one point of it (after a collective that agreed on it), so they
    # can leave together (pretrain/parallel/distributed.py).
    self.every_process = every_process


# TensorFlow's wrapping of an op's message: "{{function_node ...}} MESSAGE [Op:IteratorGetNext] name: ".
_TF_DECORATION = re.compile(r"\{\{function_node [^}]*\}\}|\s*\[Op:[^\]]*\].*$")


def carried(error: Exception, what: str, fix: str = "") -> UserError:
  """The one line of a failure raised in a library's worker thread (TensorFlow's data threads wrap a UserError
  in an error of their own, with its traceback): the UserError's message, or `what` failed, the library's
  first line and `fix`."""
  message = getattr(error, "message", None) or str(error)
  for line in message.splitlines():
    if "UserError: " in line:
      return UserError(line.split("UserError: ", 1)[1])
  first = message.strip().splitlines()[0] if message.strip() else type(error).__name__
  first = _TF_DECORATION.sub("", first).strip() or type(error).__name__
  return UserError(f"{what} failed: {first}" + (f"; {fix}" if fix else ""))


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
