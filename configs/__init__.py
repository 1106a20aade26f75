"""The run configs that ship with the package (installed as `pretrain.configs`): the quickstart, which is the
default, and the zoo sized for real hardware, as ml_collections files here and their gin twins in gin/.

  load("lm_125m")                a built-in config, by name (--config=lm_125m)
  load("path/to/my_config.py")   a config file of one's own (--config=PATH)

Either way the config then holds every setting of the objectives it may use,
at its default unless the file sets it (pretrain/objectives/).
"""

import difflib
import json
import os

import ml_collections

from pretrain import config as config_lib, objectives
from pretrain.system.errors import UserError

DIRECTORY = os.path.dirname(os.path.abspath(__file__))
GIN_DIRECTORY = os.path.join(DIRECTORY, "gin")  # The built-in gin files: a user's gin file includes them by name.
DEFAULT = "quickstart"


def names(kind: str = "py") -> list[str]:
  """The built-in configs (kind 'py') or gin files (kind 'gin'), by name."""
  folder = DIRECTORY if kind == "py" else os.path.join(DIRECTORY, "gin")
  return sorted(f[:-len(kind) - 1] for f in os.listdir(folder) if f.endswith(f".{kind}") and not f.startswith("_"))


def path(name_or_path: str, kind: str = "py") -> str:
  """The file of a built-in config named `name_or_path`, or the path itself when it is one (ends in .py or .gin, or
  holds a directory)."""
  if name_or_path.endswith(f".{kind}") or "/" in name_or_path or os.sep in name_or_path:
    bare = name_or_path.removesuffix(f".{kind}")
    if bare in names(kind) and not os.path.exists(name_or_path):
      flag = "--config" if kind == "py" else "--gin_file"
      raise UserError(f"{flag}={name_or_path!r} does not exist here; the built-in one is {flag}={bare}")
    return name_or_path
  known = names(kind)
  if name_or_path not in known:
    flag = "--config" if kind == "py" else "--gin_file"
    nearest = difflib.get_close_matches(name_or_path, known, n=1, cutoff=0.0)[0]
    raise UserError(f"{flag}={name_or_path!r} is not a built-in config; did you mean {nearest!r}? (the built-in "
                    f"ones are {', '.join(known)}; or give the path of a .{kind} file)")
  return os.path.join(GIN_DIRECTORY if kind == "gin" else DIRECTORY, f"{name_or_path}.{kind}")


def load(name_or_path: str = DEFAULT, verbose: bool = False):
  """The ConfigDict of a built-in config, a config file, or a run's config.json (every value it trained with, as
  T5X's config.gin: resume a run or start another like it), with the objectives' settings it lacks."""
  found = path(name_or_path)
  if os.path.basename(found) == "config.json":
    try:
      with open(found, encoding="utf-8") as f:
        return from_saved(json.load(f))
    except (OSError, ValueError, UserError) as e:
      raise UserError(f"--config={found} is not a run's config ({getattr(e, 'strerror', None) or e})",
                      fix="give the config.json a run wrote in its workdir, or a config's name or .py file") from None
  return objectives.with_settings(config_lib.load_config_file(found, verbose))


def from_saved(saved) -> ml_collections.ConfigDict:
  """The config of a run's saved sections (read from its config.json or a checkpoint's record), with the fields
  added since; a UserError where it is not sections of a config or a value is not of its field's kind."""
  if not isinstance(saved, dict) or not all(isinstance(v, dict) for v in saved.values()):
    raise UserError(f"it holds a {type(saved).__name__}, not the config's sections")
  missing = [section for section in ("model", "data", "train") if section not in saved]
  if missing:
    raise UserError(f"it has no {', '.join(missing)} section{'s' * (len(missing) > 1)}")
  cfg = objectives.with_settings(config_lib.with_newer_fields(ml_collections.ConfigDict(saved)))
  config_lib.check_types(cfg, load(DEFAULT))
  return cfg
