"""A training run's workdir: checks before a run uses it, and the files that describe the run.

Beside checkpoints/ and the metrics, a workdir holds config.json (the resolved
config) and spm.model or tokenizer.json (the vocabulary): what eval, generate and export read.
"""

import json
import os
import uuid

import jax
import ml_collections

from pretrain import config as config_lib, objectives
from pretrain.system import files
from pretrain.system.errors import UserError

# Config sections that fix the shapes of a checkpoint, and fields of theirs that only say how a step computes;
# other fields that fix the checkpoint's tree (the optimizer's state: AdamW's moments, Adafactor's factors).
_SHAPE_SECTIONS = ("model", "tokenizer")
_NOT_SHAPES = ("model.attention",)
_STATE_FIELDS = ("optimizer.name",)
CURATION_FILE = "data_curation.json"
VOCAB_FILES = ("spm.model", "tokenizer.json")  # The run's vocabulary (by its kind), copied beside config.json.


def check_writable(workdir: str) -> None:
  # A name of its own: every process of a multi-process run checks the shared workdir at once, and a shared
  # probe was removed under another process's check, which then failed.
  probe = os.path.join(workdir, f".writable-{uuid.uuid4().hex}")
  try:
    files.makedirs(workdir)
    with files.open_file(probe, "wb") as f:
      f.write(b"")
    files.remove(probe)
  except files.errors() as e:
    raise UserError(f"workdir {workdir!r} cannot be written ({files.reason(e)}); choose another --workdir") from None


# What a run writes in its workdir, and of which kind; a run checks them before it starts, not at its first save.
_LAYOUT = {"checkpoints": "directory", "tensorboard": "directory", "eval": "directory", "config.json": "file",
           "metrics.jsonl": "file", "curves.png": "file", **{name: "file" for name in VOCAB_FILES}}


def check_layout(workdir: str) -> None:
  """Refuses a workdir where a name the run writes is taken by something else (a file where its checkpoints
  directory goes, ...)."""
  for name, kind in _LAYOUT.items():
    path = os.path.join(workdir, name)
    if files.exists(path) and files.isdir(path) != (kind == "directory"):
      raise UserError(f"{path} is not a {kind}, but the run writes its {name} there; move it away or choose "
                      "another --workdir")


def check_same_model(cfg, workdir: str) -> None:
  """A workdir with checkpoints only resumes a run of the same model and vocabulary."""
  if not (files.exists(os.path.join(workdir, "config.json")) and files.exists(os.path.join(workdir, "checkpoints"))):
    return
  saved = saved_config(workdir).to_dict()
  current = cfg.to_dict()
  before, now = objectives.get(saved["data"]["objective"]).family, objectives.get(cfg.data.objective).family
  if not now.trains_same_model(before):
    raise UserError(f"workdir {workdir!r} holds checkpoints of a {before.name} model (objective "
                    f"{saved['data']['objective']!r}), which data.objective={cfg.data.objective!r} cannot continue; "
                    "use a new --workdir")
  fields = [f"{section}.{key}" for section in _SHAPE_SECTIONS for key in current[section]]
  for field in [f for f in fields if f not in _NOT_SHAPES] + list(_STATE_FIELDS):
    section, key = field.split(".")
    value = current[section][key]
    if saved.get(section, {}).get(key) != value:
      raise UserError(f"workdir {workdir!r} holds checkpoints of a run with {field}="
                      f"{saved.get(section, {}).get(key)!r}, not {value!r}; use a new --workdir or the old value")


def write_run_files(run, workdir: str) -> None:
  """config.json and the vocabulary (spm.model or tokenizer.json): what `pretrain generate`, `eval` and `export` need beside the checkpoints; and
  data_curation.json, what the curation stage removed from each source (if any went through one)."""
  if jax.process_index() == 0:
    # Atomically: the other processes of a resumed run read it meanwhile.
    files.write_atomically(os.path.join(workdir, "config.json"), config_lib.to_json(run.cfg).encode())
    files.copy(run.vocabulary.file, os.path.join(workdir, run.vocabulary.workdir_name))
    curated = {source.name: source.curation.report(run.vocabulary) for source in run.sources if source.curation}
    if curated:
      files.write_atomically(os.path.join(workdir, CURATION_FILE), json.dumps(curated, indent=1).encode())


def saved_config(workdir: str) -> ml_collections.ConfigDict:
  path = os.path.join(workdir, "config.json")
  if not files.exists(path):
    raise UserError(f"{workdir!r} holds no run (no config.json); give the --workdir of a training run")
  try:
    saved = json.loads(files.read_text(path))
    if not isinstance(saved, dict):
      raise ValueError(f"it holds a {type(saved).__name__}, not the config's sections")
  except ValueError as e:  # Not JSON, or not UTF-8.
    raise UserError(f"{path} is not a run's config ({e}); restore the file (train writes it at each start), or "
                    "start a new workdir") from None
  from pretrain import configs  # pylint: disable=g-import-not-at-top
  cfg = objectives.with_settings(config_lib.with_newer_fields(ml_collections.ConfigDict(saved)))
  config_lib.check_types(cfg, objectives.with_settings(configs.load(configs.DEFAULT)), path)
  return cfg


def vocabulary_file(workdir: str) -> str:
  """The vocabulary a run wrote into its workdir."""
  paths = [os.path.join(workdir, name) for name in VOCAB_FILES]
  return next((path for path in paths if files.exists(path)), paths[0])
