"""The files that describe a run beside its checkpoints: config.json, the vocabulary (spm.model or
tokenizer.json) and data_curation.json, written once a run's checks have passed and read, against what the
checkpoints record, by every command that reads a run."""

import hashlib
import json
import os

import jax
import ml_collections

from pretrain import config as config_lib, objectives
from pretrain.system import aside, files
from pretrain.system.console import log
from pretrain.system.errors import UserError
from pretrain.train import checkpoint

CURATION_FILE = "data_curation.json"
VOCAB_FILES = ("spm.model", "tokenizer.json")  # The run's vocabulary (by its kind), copied beside config.json.


# What a run writes in its workdir beside its checkpoints, and of which kind: something else in its place is set
# aside as the run starts (set_aside_misplaced); the checkpoints are the run itself (check_layout).
_LAYOUT = {"tensorboard": "directory", "eval": "directory", "config.json": "file", "metrics.jsonl": "file",
           "curves.png": "file", "goodput.json": "file", **{name: "file" for name in VOCAB_FILES}}


def set_aside_misplaced(workdir: str) -> None:
  """Moves aside what takes the place of a file or directory the run writes (a directory where metrics.jsonl goes,
  a file where tensorboard/ goes, ...): once its checks and restore have passed, before it writes."""
  for name, kind in _LAYOUT.items():
    path = os.path.join(workdir, name)
    if files.exists(path) and files.isdir(path) != (kind == "directory"):
      aside.move(path, f"is not a {kind}", f"the run writes its {name} there")


def write_run_files(run, workdir: str) -> None:
  """config.json and the vocabulary (spm.model or tokenizer.json): what `pretrain generate`, `eval` and `export` need
  beside the checkpoints; and data_curation.json, what the curation stage removed from each source (if any went
  through one). Once the run's checks and restore have passed: what is in the place of these, or of the others
  the run writes, and not of their kind, and a config.json that cannot be read, are moved aside first."""
  if jax.process_index() == 0:
    set_aside_misplaced(workdir)
    path = os.path.join(workdir, "config.json")
    problem = _read_config(path)[1] if files.exists(path) else ""
    if problem:
      aside.move(path, problem, "the run writes its config.json")
    # Atomically: the other processes of a resumed run read it meanwhile.
    files.write_atomically(os.path.join(workdir, "config.json"), config_lib.to_json(run.cfg).encode())
    copy = os.path.join(workdir, run.vocabulary.workdir_name)
    itself = all(map(files.local, (copy, run.vocabulary.file))) and files.exists(copy) and os.path.samefile(
        copy, run.vocabulary.file)  # tokenizer.path names the run's own copy (a resume may).
    if not itself:
      if files.exists(copy) and files.read_bytes(copy) != files.read_bytes(run.vocabulary.file):  # Edited, swapped.
        aside.move(copy, "is not the vocabulary the run trains with",
                   f"the run writes its {run.vocabulary.workdir_name}")
      files.copy(run.vocabulary.file, copy)
    curated = {source.name: source.curation.report(run.vocabulary) for source in run.sources if source.curation}
    if curated:
      files.write_atomically(os.path.join(workdir, CURATION_FILE), json.dumps(curated, indent=1).encode())


def saved_config(workdir: str) -> ml_collections.ConfigDict:
  """The run's config, as its config.json holds it, or, where its checkpoints record another (the file edited, or
  copied from another run), as they record it, with a line naming the fields that differ: the parameters are
  theirs. A damaged config.json is a UserError naming it."""
  path = os.path.join(workdir, "config.json")
  if not files.exists(path):
    raise UserError(f"{workdir!r} holds no run (no config.json); give the --workdir of a training run")
  cfg, problem = _read_config(path)
  if problem:
    raise UserError(f"{path} {problem}", fix="restore the file (train writes it at each start), or start a new "
                    "workdir")
  recorded = checkpoint.recorded_config(os.path.join(workdir, "checkpoints"))
  if recorded is None:
    return cfg
  recorded = _config(recorded)
  differ = differences(recorded, cfg)
  if differ:
    shown = "; ".join(f"{key}={theirs!r} there, {ours!r} recorded" for key, ours, theirs in differ[:3])
    more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
    log(f"Note: {path} is not the config its checkpoints record ({shown}{more}); the run is read as they record "
        "it (train writes config.json again at its next start)")
  return recorded


def differences(recorded, cfg) -> list[tuple[str, object, object]]:
  """(section.field, recorded value, value in `cfg`) of every field where the two configs differ (a field `cfg`
  lacks, as a user's objective's setting it does not name, is None there). A user's objective file named
  relative to here and by its absolute path is one (runs kept the form given before they kept the absolute)."""
  recorded = objectives.with_absolute_files(recorded.copy_and_resolve_references())
  theirs = objectives.with_absolute_files(cfg.copy_and_resolve_references()).to_dict()
  pairs = ((key, config_lib.value(recorded, key), theirs.get(key.split(".")[0], {}).get(key.split(".")[1]))
           for key in config_lib.flat_keys(recorded))
  plain = lambda value: json.loads(json.dumps(value, default=str))  # A tuple and the list JSON made of it are one.
  return [(key, ours, given) for key, ours, given in pairs if plain(ours) != plain(given)]


def _read_config(path: str) -> tuple[ml_collections.ConfigDict | None, str]:
  """(the config in the file `path`, None if it is damaged; what is wrong with it, '' if nothing)."""
  try:
    return _config(json.loads(files.read_text(path))), ""
  except (ValueError, *files.errors()) as e:  # Not JSON, not UTF-8, a directory.
    return None, f"is not a run's config ({files.reason(e)})"
  except objectives.FileMissing:  # The file of its objective, which the config names as it was given.
    raise
  except UserError as e:
    return None, f"is not a run's config ({e})"


def _config(saved) -> ml_collections.ConfigDict:
  """The config of the sections `saved` (as read from JSON), with the fields added since; a UserError where a
  value is not of its field's kind."""
  from pretrain import configs  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
  return configs.from_saved(saved)


def resumed_config(workdir: str) -> ml_collections.ConfigDict | None:
  """The config a training run resumes as: the one its newest checkpoint recorded, else (checkpoints written before
  they recorded it) its config.json; None if it has neither, or a config.json that cannot be read (not an error:
  the checkpoints are the run, and it moves such a file aside with a line as it writes its own)."""
  recorded = checkpoint.recorded_config(os.path.join(workdir, "checkpoints"))
  if recorded is not None:
    return _config(recorded)
  path = os.path.join(workdir, "config.json")
  return _read_config(path)[0] if files.exists(path) else None


def file_sha256(path: str) -> str:
  """What a checkpoint records of a run's vocabulary file (Checkpointer.records)."""
  return hashlib.sha256(files.read_bytes(path)).hexdigest()


def vocabulary_file(workdir: str) -> str:
  """The vocabulary a run wrote into its workdir; a UserError where its checkpoints record another (the file
  replaced or edited): the parameters are of their vocabulary's ids, and no other can stand in for it."""
  paths = [os.path.join(workdir, name) for name in VOCAB_FILES]
  path = next((path for path in paths if files.exists(path)), paths[0])
  recorded = checkpoint.recorded_vocabulary(os.path.join(workdir, "checkpoints"))
  if recorded is not None and files.exists(path) and file_sha256(path) != recorded:
    raise UserError(f"{path} is not the vocabulary the run's checkpoints were trained with (its SHA-256 is not the "
                    "one they record)", fix="restore the run's own file (train copies it there at each start, from "
                    "tokenizer.path or the data cache)")
  return path
