"""A sweep's grid: the --grid.KEY=V1,V2 flags, the points they make and their directory names, and sweep.json,
which a rerun must match (pretrain/experiments/sweep.py)."""


import itertools
import json
import os
import re
import shlex

from pretrain import config as config_lib, objectives
from pretrain.system import files
from pretrain.system.errors import UserError

MANIFEST = "sweep.json"
GRID_PREFIX = "--grid."


def is_seed(key: str) -> bool:
  """Axes whose values repeat a measurement (train.seed, data.seed, ...): the report groups over them."""
  return key.rsplit(".", 1)[-1].endswith("seed")


def split_values(text: str) -> list[str]:
  """The comma-separated values of a --grid flag; commas inside brackets or quotes belong to a value."""
  values, depth, quote, current = [], 0, None, ""
  for char in text:
    if quote:
      quote = None if char == quote else quote
    elif char in "'\"":
      quote = char
    elif char in "([{":
      depth += 1
    elif char in ")]}":
      depth -= 1
    elif char == "," and depth == 0:
      values.append(current.strip())
      current = ""
      continue
    current += char
  values.append(current.strip())
  return values


def parse_grid(argv: list[str]) -> tuple[dict[str, list[str]], list[str]]:
  """({config key: its values} in the order given, the other flags) of a command line's --grid.KEY=V1,V2 flags."""
  grid, rest = {}, []
  for arg in argv:
    if not arg.startswith(GRID_PREFIX):
      rest.append(arg)
      continue
    key, eq, text = arg[len(GRID_PREFIX):].partition("=")
    values = split_values(text)
    if not eq or not key or not all(values):
      raise UserError(f"{arg!r}: write --grid.SECTION.FIELD=VALUE1,VALUE2 (e.g. --grid.data.mlm_rate=0.1,0.15)")
    if key in grid:
      raise UserError(f"--grid.{key} is given twice; give its values in one flag")
    if len(set(values)) != len(values):
      raise UserError(f"--grid.{key}={text}: a value repeats; give each once")
    grid[key] = values
  return grid, rest


def point_names(grid: dict[str, list[str]]) -> list[tuple[str, dict[str, str]]]:
  """(directory name, {key: value}) of every point of the grid, the last axis varying fastest. A key is named by
  its field (`mlm_rate`), by its whole path where two fields share a name."""
  fields = [key.rsplit(".", 1)[-1] for key in grid]
  labels = [field if fields.count(field) == 1 else key for key, field in zip(grid, fields)]
  points = []
  for values in itertools.product(*grid.values()):
    name = ",".join(f"{label}={re.sub(r'[^A-Za-z0-9_.+-]', '_', value)}" for label, value in zip(labels, values))
    points.append((name, dict(zip(grid, values))))
  if len({name for name, _ in points}) != len(points):
    raise UserError("two points of the grid get the same directory name (values that differ only in "
                    "characters other than letters, digits and ._+-); write the values more plainly")
  return points


def in_saved_order(sweep_dir: str, grid: dict[str, list[str]]) -> dict[str, list[str]]:
  """`grid` in the order of its axes in the sweep already in `sweep_dir`, where it is the same grid: points are
  named in the order of the axes, which a rerun's flags may give otherwise."""
  if not files.exists(os.path.join(sweep_dir, MANIFEST)):
    return grid
  saved = read_manifest(sweep_dir)["grid"]
  return {key: grid[key] for key in saved} if saved == grid else grid


def same_configs(configs: dict) -> None:
  """Refuses two points whose configs are equal (--grid.train.seed=0,00), or differ only in settings that no
  objective of theirs reads (--grid.data.mlm_rate on a causal LM): one run trained twice, reported as two."""
  seen = {}
  for name, cfg in configs.items():
    unread = objectives.unread_settings(cfg)
    fields = cfg.to_dict()
    for key in unread:
      section, field = key.split(".")
      fields[section].pop(field, None)
    key = json.dumps(fields, sort_keys=True, default=str)
    if key in seen:
      differ = [k for k in unread if config_lib.value(cfg, k) != config_lib.value(configs[seen[key]], k)]
      names = ", ".join(spec.name for spec in objectives.named(cfg))
      why = f": {', '.join(differ)} is read by none of their objectives ({names})" if differ else ""
      raise UserError(f"the grid's points {seen[key]} and {name} give the same config (one run twice){why}; give "
                      "values that differ" + (", or sweep a field the run reads" if differ else ""))
    seen[key] = name


def check_manifest(sweep_dir: str, base: list[str], grid: dict[str, list[str]], resolve=None) -> None:
  """Writes sweep.json, or checks that a rerun asks for the same sweep (its points' runs would mix otherwise).
  `resolve(base flags)`: their config, so that the same values written otherwise (keep_steps=480,540 for
  (480, 540, )) are the same sweep."""
  path = os.path.join(sweep_dir, MANIFEST)
  wanted = {"base": base, "grid": grid}
  if files.exists(path):
    saved = read_manifest(sweep_dir)
    if saved != wanted and not _same_config(resolve, saved, wanted):
      raise UserError(f"{sweep_dir} holds another sweep ({shlex.join(saved['base'])}, grid {saved['grid']}); rerun "
                      "that command to continue it, or choose another --workdir")
    return
  files.makedirs(sweep_dir)
  files.write_atomically(path, json.dumps(wanted, indent=2).encode())


def _same_config(resolve, saved: dict, wanted: dict) -> bool:
  """The same grid, and base flags that give the same config (flags this version refuses give none)."""
  if resolve is None or saved["grid"] != wanted["grid"]:
    return False
  try:
    return resolve(saved["base"]).to_dict() == resolve(wanted["base"]).to_dict()
  except UserError:
    return False


def read_manifest(sweep_dir: str) -> dict:
  path = os.path.join(sweep_dir, MANIFEST)
  try:
    manifest = json.loads(files.read_text(path))
    if not isinstance(manifest, dict) or not isinstance(manifest.get("base"), list) or not isinstance(
        manifest.get("grid"), dict):
      raise ValueError("no base flags or grid")
  except files.not_found():
    raise UserError(f"{sweep_dir} holds no sweep ({MANIFEST} is missing); run pretrain sweep with --grid flags "
                    "first") from None
  except files.errors() as e:  # A file given as the sweep's directory, a directory as its sweep.json.
    raise UserError(f"{path} cannot be read ({files.reason(e)}); give the sweep's --workdir") from None
  except ValueError as e:
    raise UserError(f"{path} is damaged ({e}); delete it and rerun the sweep's command (finished points are "
                    "kept)") from None
  return manifest


