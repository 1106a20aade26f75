"""Config files: a user's Python file run as a module of its own (its errors in one line), its get_config(),
fields added since it was written, a saved config's types checked, and the JSON a run saves."""

import importlib.util
import json
import os
import sys
import traceback

import ml_collections

from pretrain.config import schema
from pretrain.config.keys import flat_keys
from pretrain.system.errors import UserError


def _run_config_code(path: str, code, verbose: bool = False, what: str = "config file"):
  """Runs code of the user's file `path` (a config file, or `what` it is): an exception in it becomes one line
  naming the file and the error (with `verbose`, after the file's own traceback)."""
  try:
    return code()
  except SyntaxError as e:
    raise UserError(f"{what} {path!r} has a syntax error at line {e.lineno}: {e.msg}") from None
  except UserError:
    raise
  except Exception as e:  # pylint: disable=broad-except  (any error of the user's code)
    if verbose:
      traceback.print_exc()
    raise UserError(f"{what} {path!r} raised {type(e).__name__}: {e}"
                    + ("" if verbose else " (--verbose shows where)")) from None


def load_module(path: str, name: str = "_pretrain_run_config", verbose: bool = False, what: str = "config file"):
  """Imports the user's Python file `path` (a config file, or `what` it is) as a module of its own, `name` (a
  private one: it goes in sys.modules, where AutoGraph finds a function's module to read a lambda's source; a
  lambda of a module it cannot find is not converted, with a four-line warning each time it is traced)."""
  spec = importlib.util.spec_from_file_location(name, path)
  if spec is None:  # Python imports .py files only.
    raise UserError(f"{what} {path!r} is not a Python file; give the path of a .py file")
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module
  try:
    _run_config_code(path, lambda: spec.loader.exec_module(module), verbose, what)
  except BaseException:
    del sys.modules[name]
    raise
  return module


def load_config_file(path: str, verbose: bool = False) -> ml_collections.ConfigDict:
  """Imports `path` and returns its `get_config()` (pretrain.configs.load adds the objectives' settings)."""
  if not os.path.isfile(path):
    raise UserError(f"config file {path!r} does not exist; pass --config=quickstart (or another built-in config) "
                    "or the path of a config file")
  if path.endswith(".gin"):
    raise UserError(f"--config={path} is a gin file; pass it with --gin_file={path} (over --config's built-in "
                    "config, quickstart by default)")
  module = load_module(path, verbose=verbose)
  if not hasattr(module, "get_config"):
    raise UserError(f"config file {path!r} defines no get_config(); add one that returns a ConfigDict")
  cfg = _run_config_code(path, module.get_config, verbose)
  if not isinstance(cfg, ml_collections.ConfigDict):
    raise UserError(f"config file {path!r}: get_config() returned a {type(cfg).__name__}; return an "
                    "ml_collections.ConfigDict, e.g. pretrain.config.schema.defaults() with your changes")
  return with_defaults(with_newer_fields(cfg))


def with_defaults(cfg: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """`cfg` with every field it lacks at its default (schema.py): a config file may declare only what it changes."""
  with cfg.unlocked():
    for section, entries in schema.SCHEMA.items():
      if section not in cfg:
        cfg[section] = ml_collections.ConfigDict()
      for name, field in entries.items():
        if name not in cfg[section]:
          cfg[section][name] = field.default
  return cfg


# Fields added after runs and config files were first written, with the value that keeps their behaviour:
# a config.json or a config file from before a field existed reads as if it held this value (schema.py's `older`).
# (The objectives' own settings come with their defaults from pretrain/objectives/.)
NEWER_FIELDS = schema.newer_fields()


def with_newer_fields(cfg: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  for key, value in NEWER_FIELDS.items():
    section, name = key.split(".")
    if section in cfg and name not in cfg[section]:
      with cfg.unlocked():
        cfg[section][name] = value
  return cfg


def _same_kind(value, reference) -> bool:
  """Whether `value` (read from JSON) may stand where the config holds `reference`: the same type, an int for a
  float, a list for a tuple, None for anything (and anything for None)."""
  if value is None or reference is None:
    return True
  if isinstance(reference, bool) or isinstance(value, bool):
    return isinstance(reference, bool) and isinstance(value, bool)
  if isinstance(reference, float):
    return isinstance(value, (int, float))
  if isinstance(reference, (list, tuple)):
    return isinstance(value, (list, tuple))
  return isinstance(value, type(reference))


def check_types(cfg: ml_collections.ConfigDict, reference: ml_collections.ConfigDict) -> None:
  """Refuses a field of `cfg` (a config read from a file) whose value is not of the kind `reference` holds."""
  for key in flat_keys(cfg):
    section, _, name = key.partition(".")
    if section in reference and name in reference[section] and not _same_kind(cfg[section][name],
                                                                              reference[section][name]):
      value, expected = cfg[section][name], reference[section][name]
      raise UserError(f"{key} is {value!r}, not a {type(expected).__name__} (e.g. {expected!r})")


def to_json(cfg: ml_collections.ConfigDict) -> str:
  return json.dumps(cfg.to_dict(), indent=2, sort_keys=True)
