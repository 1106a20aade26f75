"""A user's own objective, named by data.objective=MODULE:CLASS or FILE.py:CLASS: imported, checked, and its
preprocess's errors said in one line naming the user's file and line."""

import functools
import importlib
import os
import re
import traceback

from pretrain import config as config_lib
from pretrain.families import Family
from pretrain.objectives.spec import Objective
from pretrain.system import tf_loader
from pretrain.system.errors import UserError


class FileMissing(UserError):
  """The file of a FILE.py:CLASS objective is not there: the command's, not a damaged config's, problem."""


def absolute(reference):
  """FILE.py:CLASS with FILE made absolute where it is a file here (MODULE:CLASS, built-in names, a missing or
  remote file, and values of other kinds as they are): what config.json keeps, so that eval, generate and a resume
  from another directory find the file."""
  if not isinstance(reference, str) or "://" in reference:
    return reference
  where, _, attribute = reference.rpartition(":")
  return f"{os.path.abspath(where)}:{attribute}" if where.endswith(".py") and os.path.isfile(where) else reference


@functools.cache
def load(reference: str, built_in: tuple[str, ...]) -> type[Objective]:
  """A user's objective, `reference` = MODULE:CLASS or FILE.py:CLASS, checked (a name other than the `built_in`
  objectives', settings in the config's sections), its preprocess's errors said in one line."""
  where, _, attribute = reference.rpartition(":")
  what = f"the objective {reference!r}"
  tf_loader.tensorflow()  # First and quietly: a user's module may import TensorFlow (an objective's code runs on it).
  if where.endswith(".py"):
    if not os.path.isfile(where):
      here = "" if os.path.isabs(where) else f" in {os.getcwd()} (a relative path is read from the command's directory)"
      raise FileMissing(f"{what}: the file {where!r} does not exist{here}; give FILE.py:CLASS or MODULE:CLASS")
    module = config_lib.load_module(where, f"_pretrain_objective_{os.path.splitext(os.path.basename(where))[0]}",
                                    what="objective file")
  else:
    try:
      module = importlib.import_module(where)
    except ImportError as e:
      raise UserError(f"{what}: the module {where!r} cannot be imported ({e}); give an importable MODULE:CLASS or "
                      "FILE.py:CLASS") from None
  spec = getattr(module, attribute, None)
  if not (isinstance(spec, type) and issubclass(spec, Objective)):
    raise UserError(f"{what}: {where} has no subclass of pretrain.objectives.Objective named {attribute!r}")
  if not spec.name or not isinstance(spec.family, Family) or spec.preprocess is Objective.preprocess:
    raise UserError(f"{what} must set `name` and `family` (e.g. pretrain.families.CAUSAL_LM) and define "
                    "preprocess(); see docs/guide/objectives.md, 'Your own objective'")
  if spec.name in built_in:
    raise UserError(f"{what} is named {spec.name!r}, as a built-in objective; give it a name of its own")
  for key in spec.settings:
    if key.count(".") != 1 or key.split(".")[0] not in ("data", "model", "loss"):
      raise UserError(f"{what} declares the setting {key!r}; name settings data.NAME, model.NAME or loss.NAME")
  return _guarded(spec, what, getattr(module, "__file__", None) or where)


def _guarded(spec: type[Objective], what: str, path: str) -> type[Objective]:
  """`spec` whose preprocess, where it raises (as the data pipeline is built: tf.data traces the functions it maps
  then), ends in one line naming the user's file, line and exception, not TensorFlow's and seqio's traceback
  (which --verbose prints first)."""

  def preprocess(self, dataset, sequence_length, output_features):
    try:
      return spec.preprocess(self, dataset, sequence_length, output_features)
    except UserError:
      raise
    except Exception as e:  # pylint: disable=broad-except  (any error of the user's code)
      if not tf_loader.quiet:
        traceback.print_exc()
      raise UserError(f"{what}: its preprocess raised {_user_failure(e, path)}"
                      + (" (--verbose shows the traceback)" if tf_loader.quiet else "")) from None

  return type(spec.__name__, (spec,), {"preprocess": preprocess, "__module__": spec.__module__,
                                       "__qualname__": spec.__qualname__, "__doc__": spec.__doc__})


def _user_failure(error: Exception, path: str) -> str:
  """'TYPE: message at FILE:LINE' of an exception raised in the user's file `path` (AutoGraph, which converts the
  functions tf.data maps, names the user's line in its message rather than in the traceback)."""
  text = str(error).strip()
  places = [(frame.filename, frame.lineno) for frame in traceback.extract_tb(error.__traceback__)]
  places += [(f, int(n)) for f, n in re.findall(r'File "([^"]+)", line (\d+)', text)]  # Deeper: where it raised.
  mine = [(f, n) for f, n in places if os.path.abspath(f) == os.path.abspath(path)]
  last = text.splitlines()[-1].strip() if text else ""
  message = last if last.startswith(f"{type(error).__name__}:") else f"{type(error).__name__}: {last}".rstrip(": ")
  return message + (f" at {mine[-1][0]}:{mine[-1][1]}" if mine else "")
