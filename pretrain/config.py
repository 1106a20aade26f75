"""Run configuration: ml_collections config files, dotted-key overrides, checks.

A run is described by a Python file whose `get_config()` returns a ConfigDict
(see configs/quickstart.py). Any field can be overridden on the command line
with `--config.SECTION.FIELD=VALUE`; the value is parsed to the field's type.
Every front-end (command line, gin files, the config zoo) sets a field through
`set_value`; they import this module, never the reverse (pretrain.command_line
joins them for the commands).
"""

import ast
import difflib
import importlib.util
import json
import os
import traceback

import ml_collections

from pretrain.errors import UserError

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _run_config_code(path: str, code, verbose: bool = False):
  """Runs code of the config file `path`: an exception in it becomes one line naming the file and the error
  (with `verbose`, after the file's own traceback)."""
  try:
    return code()
  except SyntaxError as e:
    raise UserError(f"config file {path!r} has a syntax error at line {e.lineno}: {e.msg}") from None
  except UserError:
    raise
  except Exception as e:  # pylint: disable=broad-except  (any error of the user's code)
    if verbose:
      traceback.print_exc()
    raise UserError(f"config file {path!r} raised {type(e).__name__}: {e}"
                    + ("" if verbose else " (--verbose shows where)")) from None


def load_module(path: str, name: str = "_pretrain_run_config", verbose: bool = False):
  """Imports the Python file `path` (a config file, or a helper beside it) as a module of its own."""
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  _run_config_code(path, lambda: spec.loader.exec_module(module), verbose)
  return module


def sibling(path: str, name: str):
  """The module `name`.py beside the file `path`: how a config file imports a neighbour,
  e.g. `_zoo = config.sibling(__file__, "_zoo")`."""
  return load_module(os.path.join(os.path.dirname(os.path.abspath(path)), f"{name}.py"), name)


def load_config_file(path: str, verbose: bool = False) -> ml_collections.ConfigDict:
  """Imports `path` and returns its `get_config()`."""
  if not os.path.isfile(path):
    raise UserError(f"config file {path!r} does not exist; pass --config=configs/quickstart.py "
                    "or the path of another config file")
  module = load_module(path, verbose=verbose)
  if not hasattr(module, "get_config"):
    raise UserError(f"config file {path!r} defines no get_config(); add one that returns a ConfigDict")
  return _run_config_code(path, module.get_config, verbose)


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
      return type(current)(ast.literal_eval(text))
  except (ValueError, SyntaxError):
    raise UserError(f"--config.{key}={text!r} is not a valid {type(current).__name__}; "
                    f"give a value like {current!r}") from None
  try:  # A field that is None (or any other type) takes a Python literal, else a string.
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


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


def apply_overrides(cfg: ml_collections.ConfigDict, args: list[str]) -> list[str]:
  """Applies every `--config.KEY=VALUE` (or `--config.KEY VALUE`) in args; returns the rest."""
  rest = []
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
      override(cfg, key, text)
    else:
      rest.append(arg)
    i += 1
  return rest


def _require(condition: bool, message: str) -> None:
  if not condition:
    raise UserError(message)


# Fields that must be positive. train.keep_checkpoints=0 would train and keep nothing.
POSITIVE = ("train.steps", "train.batch_size", "train.microbatches", "train.eval_every", "train.checkpoint_every",
            "train.log_every", "train.eval_batches", "train.keep_checkpoints", "model.d_model", "model.num_layers",
            "model.num_heads", "model.num_kv_heads", "model.head_dim", "model.mlp_dim", "optimizer.learning_rate")


def validate(cfg: ml_collections.ConfigDict) -> None:
  """Checks values that would otherwise fail deep inside JAX or TensorFlow."""
  t = cfg.train
  for key in POSITIVE:
    section, name = key.split(".")
    value = cfg[section][name]
    _require(value > 0, f"{key} must be positive, got {value}; set --config.{key} to a positive value")
  _require(cfg.data.seq_len >= 2, f"data.seq_len must be at least 2, got {cfg.data.seq_len}")
  _require(cfg.data.source in ("corpus", "files", "tfds"),
           f"data.source must be 'corpus', 'files' or 'tfds', got {cfg.data.source!r}")
  m = cfg.model
  _require(m.dtype in ("auto", "float32", "bfloat16", "float16"),
           f"model.dtype must be auto, float32, bfloat16 or float16, got {m.dtype!r}")
  _require(m.param_dtype in ("float32", "bfloat16"),
           f"model.param_dtype must be float32 or bfloat16, got {m.param_dtype!r}")
  _require(0.0 <= m.dropout < 1.0, f"model.dropout must be in [0, 1), got {m.dropout}")
  _require(cfg.optimizer.warmup_steps >= 0, "optimizer.warmup_steps must be >= 0")
  profile = tuple(t.profile_steps)
  _require(not profile or (len(profile) == 2 and 0 <= profile[0] < profile[1]),
           f"train.profile_steps must be () or (start, stop) with 0 <= start < stop, got {profile}")


def to_json(cfg: ml_collections.ConfigDict) -> str:
  return json.dumps(cfg.to_dict(), indent=2, sort_keys=True)
