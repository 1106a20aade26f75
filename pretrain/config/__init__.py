"""Run configuration: ml_collections config files, dotted-key overrides, checks (the fields themselves, their
defaults, valid values and help: schema.py).

A run is described by a Python file whose `get_config()` returns a ConfigDict
(see configs/quickstart.py; pretrain.configs.load finds a built-in one by
name). Any field can be overridden on the command line
with `--config.SECTION.FIELD=VALUE`; the value is parsed to the field's type.
Every front-end (command line, gin files, the config zoo) sets a field through
`set_value`; they import this module, never the reverse (pretrain.cli joins
them for the commands).
"""

import ast
import difflib
import functools
import importlib.util
import json
import math
import operator
import os
import re
import sys
import traceback

import ml_collections

from pretrain.config import rules, schema
from pretrain.config.rules import check_with_family, wsd_decay_steps  # pylint: disable=unused-import
# The valid-value helpers, for the objectives and config files that declare settings (config.POSITIVE, ...).
from pretrain.config.schema import (BELOW_ONE, FRACTION, NOT_NEGATIVE, OPEN_FRACTION,  # pylint: disable=unused-import
                                     POSITIVE, Valid, one_of)
from pretrain.system.errors import UserError

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


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
  module = load_module(path, verbose=verbose)
  if not hasattr(module, "get_config"):
    raise UserError(f"config file {path!r} defines no get_config(); add one that returns a ConfigDict")
  return with_newer_fields(_run_config_code(path, module.get_config, verbose))


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


def value(cfg: ml_collections.ConfigDict, key: str):
  """The value of a dotted key of a config's section, e.g. value(cfg, 'train.steps')."""
  section, field = key.split(".")
  return cfg[section][field]


def flat_keys(cfg: ml_collections.ConfigDict, prefix: str = "") -> list[str]:
  """All dotted leaf keys of a config, e.g. ['train.steps', ...]."""
  keys = []
  for name, value in cfg.items():
    key = f"{prefix}{name}"
    if isinstance(value, ml_collections.ConfigDict):
      keys.extend(flat_keys(value, key + "."))
    else:
      keys.append(key)
  return keys


def _parse_value(text: str, current, key: str):
  """Parses `text` to the type of the field's current value."""
  try:
    if isinstance(current, bool):
      lowered = text.lower()
      if lowered not in _TRUE | _FALSE:
        raise ValueError
      return lowered in _TRUE
    if isinstance(current, int):
      return int(text)
    if isinstance(current, float):
      return float(text)
    if isinstance(current, str):
      return text
    if isinstance(current, (tuple, list)):
      return type(current)(_sequence(text))
  except (ValueError, SyntaxError):
    raise UserError(f"--config.{key}={text!r} is not a valid {type(current).__name__}; "
                    f"give a value like {_example(key, current)}") from None
  try:  # A field that is None (or any other type) takes a Python literal, else a string.
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def _sequence(text: str) -> tuple:
  """A tuple field's value: a Python literal, one value (`pretrain_cloze`, `120`) or bare names separated by commas
  (`pretrain_cloze,pretrain_documents`), as a user writes them on a command line."""
  try:
    value = ast.literal_eval(text)
  except (ValueError, SyntaxError):
    names = text.split(",")
    if not all(re.fullmatch(r"[\w./:-]+", name.strip()) for name in names):
      raise ValueError from None
    return tuple(name.strip() for name in names)
  return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _example(key: str, current) -> str:
  """What a field's value looks like: its help where the default says nothing (an empty tuple)."""
  section, _, name = key.partition(".")
  field = schema.SCHEMA.get(section, {}).get(name)
  if isinstance(current, (tuple, list)) and not current and field is not None and field.help:
    return f"{current!r} or, as the field's help says: {field.help}"
  return repr(current)


def _locate(cfg: ml_collections.ConfigDict, key: str, what: str = "", prefix: str = "--config."):
  """(section, field) of the dotted `key`, or a UserError naming the nearest valid key."""
  keys = flat_keys(cfg)
  if key not in keys:
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.4)
    hint = f"did you mean {prefix}{close[0]}?" if close else "see the config file for the valid keys"
    raise UserError(f"{what + ': ' if what else ''}unknown config key {key!r}; {hint}")
  *parents, leaf = key.split(".")
  node = cfg
  for parent in parents:
    node = node[parent]
  return node, leaf


def get(cfg: ml_collections.ConfigDict, key: str):
  """The value of the dotted `key`."""
  node, leaf = _locate(cfg, key)
  return node[leaf]


def set_value(cfg: ml_collections.ConfigDict, key: str, value, what: str) -> None:
  """Sets the dotted `key` of `cfg` to a parsed value of the field's type."""
  node, leaf = _locate(cfg, key, what, prefix="")
  try:
    node[leaf] = value
  except TypeError as e:
    raise UserError(f"{what}: {e}") from None


def update(cfg: ml_collections.ConfigDict, overrides: dict, where: str) -> ml_collections.ConfigDict:
  """Sets each dotted key of `overrides`, e.g. {"model.d_model": 512}; returns `cfg`."""
  for key, value in overrides.items():
    set_value(cfg, key, value, f"{key} ({where})")
  return cfg


def override(cfg: ml_collections.ConfigDict, key: str, text: str) -> None:
  """Sets the dotted `key` of `cfg` from its command-line text."""
  node, leaf = _locate(cfg, key)
  set_value(cfg, key, _parse_value(text, node[leaf], key), f"--config.{key}")


def parse_overrides(args: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
  """The (KEY, VALUE text) of every `--config.KEY=VALUE` (or `--config.KEY VALUE`) in args, and the other args."""
  overrides, rest = [], []
  i = 0
  while i < len(args):
    arg = args[i]
    if arg.startswith("--config."):
      body = arg[len("--config."):]
      if "=" in body:
        key, text = body.split("=", 1)
      elif i + 1 < len(args):
        key, text = body, args[i + 1]
        i += 1
      else:
        raise UserError(f"{arg} has no value; write {arg}=VALUE")
      overrides.append((key, text))
    else:
      rest.append(arg)
    i += 1
  return overrides, rest


def apply_overrides(cfg: ml_collections.ConfigDict, args: list[str]) -> list[str]:
  """Applies every `--config.KEY=VALUE` (or `--config.KEY VALUE`) in args; returns the rest."""
  overrides, rest = parse_overrides(args)
  for key, text in overrides:
    override(cfg, key, text)
  return rest


# The valid values of every checked field, declared once with its default and help (schema.py). Fields that only
# some families use are checked here too when their range never depends on the family; the rules between fields,
# also those that depend on the family, are rules.py's; an objective's own settings are declared, with their
# defaults and ranges, in its module (pretrain/objectives/).
RANGES = schema.ranges()


def validate(cfg: ml_collections.ConfigDict, more: dict[str, Valid] | None = None) -> None:
  """Checks that every number is finite, every field of RANGES (and of `more`: the objectives' settings,
  pretrain.objectives.validate) and the rules between fields (rules.check), before anything is built."""
  for key in flat_keys(cfg):
    value = functools.reduce(operator.getitem, key.split("."), cfg)
    rules.require(not isinstance(value, float) or math.isfinite(value),
                  f"{key} must be a finite number, got {value!r}; set --config.{key} to one")
  for key, valid in {**RANGES, **(more or {})}.items():
    section, name = key.split(".")
    value = cfg[section][name]
    rules.require(valid.test(value), f"{key} must be {valid.what}, got {value!r}; set --config.{key} to such a value")
  rules.check(cfg)


def to_json(cfg: ml_collections.ConfigDict) -> str:
  return json.dumps(cfg.to_dict(), indent=2, sort_keys=True)
