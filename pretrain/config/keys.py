"""A config's dotted keys ('train.steps'): listed, read, set from Python or from a command line's
`--config.KEY=VALUE`, each value parsed to the field's type, a mistyped key refused naming the nearest."""

import ast
import difflib
import re

import ml_collections

from pretrain.config import schema
from pretrain.system.errors import UserError

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


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


def get(cfg: ml_collections.ConfigDict, key: str, prefix: str = "--config."):
  """The value of the dotted `key`; an unknown key's error names the nearest as PREFIX.KEY (the flag it came in)."""
  node, leaf = _locate(cfg, key, prefix=prefix)
  return node[leaf]


# Fields of text that hold a preset's name or a Python literal (parallel/mesh.py reads it): a literal that a gin
# file or a Python config gives as such is kept as its text.
LITERALS_AS_TEXT = ("mesh.rules",)


def set_value(cfg: ml_collections.ConfigDict, key: str, value, what: str) -> None:
  """Sets the dotted `key` of `cfg` to a parsed value of the field's type."""
  node, leaf = _locate(cfg, key, what, prefix="")
  current = node[leaf]
  if key in LITERALS_AS_TEXT and isinstance(value, (tuple, list)):
    value = repr(tuple(value))
  # ml_collections takes None into any field and a bool into a number's (True as 1): a gin binding or a config
  # file's typo would then pass as "off", or as one step.
  mistyped = isinstance(value, bool) and not isinstance(current, (bool, type(None)))
  wrong = UserError(f"{what}: {value!r} is not a value of this field; give a {type(current).__name__}, e.g. "
                    f"{current!r}")
  if (value is None and current is not None) or mistyped:
    raise wrong
  try:
    node[leaf] = value
  except TypeError:  # ml_collections' own words name its internals ("original type ... cannot be casted").
    raise wrong from None


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
