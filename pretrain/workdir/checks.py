"""The checks of a workdir before a run uses it: that it can be written, that its checkpoints directory is one,
and that checkpoints already there are of the same model and vocabulary, and end after the step they resume."""

import os
import uuid

from pretrain import config as config_lib, objectives
from pretrain.system import files
from pretrain.system.console import log
from pretrain.system.errors import UserError
from pretrain.train import checkpoint, optimizer
from pretrain.workdir.run_files import differences, file_sha256, resumed_config

# Config sections that fix the shapes of a checkpoint, and fields of theirs that only say how a step computes;
# other fields that fix the checkpoint's tree (the optimizer's state: AdamW's moments, Adafactor's factors).
_SHAPE_SECTIONS = ("model", "tokenizer")
_NOT_SHAPES = ("model.attention", "model.dtype", "model.remat", "model.dropout", "model.moe_capacity_factor",
               "model.moe_grouped_matmul", "model.moe_router_jitter")
_STATE_FIELDS = ("optimizer.name",)
# Fields whose being zero or not adds or removes a link of the optimizer's chain, and so a part of its state
# (train/optimizer.py): {field: whether it is a link, from the optimizer section}.
_STATE_LINKS = {"optimizer.grad_clip": lambda opt: bool(opt.get("grad_clip")),
                "optimizer.weight_decay": lambda opt: opt.get("name") == "adafactor" and bool(opt.get("weight_decay"))}


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


def check_layout(workdir: str) -> None:
  """Refuses a workdir where a file takes the place of the run's checkpoints directory."""
  path = os.path.join(workdir, "checkpoints")
  if files.exists(path) and not files.isdir(path):
    raise UserError(f"{path} is not a directory, but the run writes its checkpoints there; move it away or choose "
                    "another --workdir")


def check_same_model(cfg, workdir: str, fix: str = "use a new --workdir or the old value") -> None:
  """A workdir with checkpoints only resumes a run of the same model and vocabulary (as its newest checkpoint
  records them, or its config.json: resumed_config); `fix`: what to do about a field that differs."""
  if not files.exists(os.path.join(workdir, "checkpoints")):
    return
  saved = resumed_config(workdir)
  if saved is None:
    return
  saved = saved.to_dict()
  current = cfg.to_dict()
  before, now = objectives.get(saved["data"]["objective"]).family, objectives.get(cfg.data.objective).family
  if not now.trains_same_model(before):
    article = "an" if before.name[0] in "aeiou" else "a"
    raise UserError(f"workdir {workdir!r} holds checkpoints of {article} {before.name} model (objective "
                    f"{saved['data']['objective']!r}), which data.objective={cfg.data.objective!r} cannot continue; "
                    "resume it with the config it trained with (its config.json), or use a new --workdir")
  fields = [f"{section}.{key}" for section in _SHAPE_SECTIONS for key in current[section]]
  # A vocabulary the checkpoints record is compared by its contents as the run resumes (check_resume), not by path.
  by_contents = ("tokenizer.path",) if checkpoint.recorded_vocabulary(os.path.join(workdir, "checkpoints")) else ()
  for field in [f for f in fields if f not in _NOT_SHAPES + by_contents] + list(_STATE_FIELDS):
    section, key = field.split(".")
    value = current[section][key]
    if saved.get(section, {}).get(key) != value:
      raise UserError(f"workdir {workdir!r} holds checkpoints of a run with {field}="
                      f"{saved.get(section, {}).get(key)!r}, not {value!r}", fix)
  for field, link in _STATE_LINKS.items():
    if link(saved.get("optimizer", {})) != link(current["optimizer"]):
      theirs = saved.get("optimizer", {}).get(field.split(".")[1])
      raise UserError(f"workdir {workdir!r} holds checkpoints of a run with {field}={theirs!r}, not "
                      f"{config_lib.value(cfg, field)!r}: one of them is 0, which leaves its step out of the "
                      "optimizer, whose state the checkpoints hold", fix="use a new --workdir, or a value that is 0 "
                      "where theirs is and not where it is not")


def check_resume(run, workdir: str, start: int) -> None:
  """A run resumed from its checkpoint of `start`: refuses a config that ends before it, and a vocabulary other than
  the one the checkpoints were trained with (one trained on another data.source: its token ids would mean other
  text); says in one line where the config differs from the run's own (resumed_config), which it then becomes."""
  saved = resumed_config(workdir)
  own = f" (its train.steps={saved.train.steps})" if saved is not None else ""
  if run.cfg.train.steps < start:
    raise UserError(f"train.steps={run.cfg.train.steps} ends before the checkpoint of step {start} in {workdir!r}",
                    fix=f"rerun with the run's own settings{own}, or a larger --config.train.steps")
  recorded = checkpoint.recorded_vocabulary(os.path.join(workdir, "checkpoints"))
  if recorded is not None and file_sha256(run.vocabulary.file) != recorded:
    own_copy = os.path.join(workdir, run.vocabulary.workdir_name)
    kept = files.exists(own_copy) and file_sha256(own_copy) == recorded
    learned = saved is not None and not saved.tokenizer.path
    raise UserError(f"the vocabulary {run.vocabulary.file} is not the one the checkpoints in {workdir!r} were trained "
                    "with (its SHA-256 differs): their token ids would mean other text"
                    + ("; a vocabulary learned from the data as it is now differs where the data changed (its "
                       "files, or the data.* fields)" if learned and not run.cfg.tokenizer.path else ""),
                    fix=(f"resume with the run's own vocabulary, which its workdir keeps: "
                         f"--config.tokenizer.path={own_copy}" if kept else
                         "resume with the run's data.source and tokenizer settings"
                         + (f" (data.source={saved.data.source!r}, tokenizer.path={saved.tokenizer.path!r})"
                            if saved is not None else "")))
  differ = [d for d in differences(saved, run.cfg) if d[0] != "train.keep_steps"] if saved is not None else []
  if differ:
    shown = "; ".join(f"{key} {theirs!r} -> {ours!r}" for key, theirs, ours in differ[:6])
    more = f" and {len(differ) - 6} more" if len(differ) > 6 else ""
    # The schedule is a function of the steps too: a longer cosine run's rate at the checkpoint is another.
    rates = [float(optimizer.schedule(c.optimizer, c.train.steps)(start)) for c in (saved, run.cfg)]
    rate = f"; the learning rate at step {start} {rates[0]:.3g} -> {rates[1]:.3g}" if rates[0] != rates[1] else ""
    log(f"Resuming with another config than the run's: {shown}{more}{rate} (from the command line; rerun with the "
        "run's flags to keep its own)")
