"""The run configs that ship with the package (installed as `pretrain.configs`): the quickstart, which is the
default, and the zoo sized for real hardware, as ml_collections files here and their gin twins in gin/.

  load("lm_125m")                a built-in config, by name (--config=lm_125m)
  load("path/to/my_config.py")   a config file of one's own (--config=PATH)

Either way the config then holds every setting of the objectives it may use,
at its default unless the file sets it (pretrain/objectives/).
"""

import difflib
import os

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
  """The ConfigDict of a built-in config or a config file, with the objectives' settings it lacks."""
  return objectives.with_settings(config_lib.load_config_file(path(name_or_path), verbose))
