"""Cooldown branches (`pretrain cooldown`): a run that continues another run, its parent, from the parent's
checkpoint of step S, and decays the learning rate over its own last D steps.

The parent trains with optimizer.schedule=wsd and S lies in its stable phase (from the end of its warm-up to the
start of its decay), where its rate is the peak whatever the run's length. A wsd run of S + D steps whose decay is
its last D steps has the same rates up to S, so the branch is that run: the parent's config with train.steps = S + D
and optimizer.decay_steps = D, its parent recorded in train.parent and train.parent_step (and the command line's
overrides, e.g. the decay's shape). It restores the parent's state (parameters, optimizer state, step), data
position and spike guard record of step S, saves them as its own first checkpoint, and from there on is a run like
any other: it reads on through the parent's data stream, and resumes from its own checkpoints.
"""

import os

import ml_collections

from pretrain import config as config_lib
from pretrain.system import files
from pretrain.system.errors import UserError
from pretrain.train import checkpoint
from pretrain.workdir import resumed_config, saved_config, vocabulary_file

# Fields the branch sets from its parent and the command's --from_step and --steps; overriding them would make
# another run.
SET_BY_BRANCH = ("train.steps", "train.parent", "train.parent_step", "train.keep_steps", "optimizer.schedule",
                 "optimizer.decay_steps", "optimizer.learning_rate", "optimizer.warmup_steps")


def location(workdir: str) -> str:
  """How a branch names its parent: the absolute path of a local workdir, else the URL as given."""
  return os.path.abspath(workdir) if files.local(workdir) else workdir


def config(parent: str, step: int, steps: int) -> ml_collections.ConfigDict:
  """The config of a branch of the run in `parent` at `step` that decays over `steps` more steps, once the parent
  is checked: a wsd run, `step` in its stable phase, its checkpoint of `step` kept and intact."""
  cfg = saved_config(parent)
  opt, total = cfg.optimizer, cfg.train.steps
  if opt.schedule != "wsd":
    raise UserError(f"{parent!r} trains with optimizer.schedule={opt.schedule}: a cooldown branches a wsd run in "
                    "its stable phase, where the learning rate is the peak whatever the run's length; train the "
                    "parent with --config.optimizer.schedule=wsd")
  stable = (opt.warmup_steps, total - config_lib.wsd_decay_steps(opt, total))
  if not stable[0] <= step <= stable[1]:
    where = (f"in its warm-up (optimizer.warmup_steps={opt.warmup_steps})" if step < stable[0] else
             f"past the start of its decay (step {stable[1]})")
    raise UserError(f"step {step} of {parent!r} is {where}; branch from its stable phase, steps {stable[0]} to "
                    f"{stable[1]}")
  saver = checkpoint.Checkpointer(os.path.join(parent, "checkpoints"), 1, move_aside=False)
  try:
    saver.check_has(step, parent, "branch from one of those (a run keeps its branch points when trained with "
                                  "--config.train.keep_steps=(S1, S2, ...))")
  finally:
    saver.close()
  config_lib.update(cfg, {"train.steps": step + steps, "optimizer.decay_steps": steps, "train.parent":
                          location(parent), "train.parent_step": step, "train.keep_steps": ()}, "the branch")
  if cfg.train.init_from_hf:  # The parent's checkpoint and its copy of the vocabulary hold the import: the
    # directory, perhaps gone with a preempted machine's disk or relative to another folder, is not read again.
    config_lib.update(cfg, {"train.init_from_hf": "", "tokenizer.path": vocabulary_file(parent)}, "the branch")
  return cfg


def existing(out: str, parent: str, step: int, steps: int) -> ml_collections.ConfigDict | None:
  """The saved config of `out` if it holds this branch already (to resume), None if it holds no run; another run
  there is refused."""
  if location(out) == location(parent):
    raise UserError(f"--out={out!r} is the parent's workdir; give the branch a directory of its own")
  if location(out).startswith(location(parent).rstrip("/") + "/"):  # Its files would mix with the parent's.
    raise UserError(f"--out={out!r} is inside the parent's workdir; give the branch a directory of its own, "
                    "outside it")
  cfg = resumed_config(out)
  if cfg is None:
    if files.exists(os.path.join(out, "checkpoints")) and files.glob(os.path.join(out, "checkpoints", "*")):
      raise UserError(f"--out={out!r} holds checkpoints but no config.json; choose another --out")
    return None
  t = cfg.train
  if (t.parent, t.parent_step, t.steps) == (location(parent), step, step + steps):
    return cfg
  held = (f"the branch of {t.parent!r} from step {t.parent_step} to {t.steps}" if t.parent else
          "a run of its own")
  raise UserError(f"--out={out!r} already holds {held}; choose another --out (pretrain train --workdir={out} "
                  "resumes what it holds)")


def check_fields(cfg, branch_cfg, how: str) -> None:
  """Refuses a config whose fields that a branch sets (SET_BY_BRANCH) differ from `branch_cfg`'s, the branch's
  own: however a branch is reached (`how`), its steps, decay and parent are the ones its checks made."""
  for key in SET_BY_BRANCH:
    given, own = config_lib.value(cfg, key), config_lib.value(branch_cfg, key)
    if given != own and not (key == "train.parent" and location(str(given)) == own):
      raise UserError(f"{key}={given!r} {how}, but the branch's is {own!r}: a branch's steps, decay and parent are "
                      "set by pretrain cooldown --workdir=PARENT --from_step=S --steps=D --out=DIR, which checks them; "
                      "make another branch that way")


def check_made(cfg) -> None:
  """A branch set up through its fields (train.parent, train.parent_step) on `pretrain train` in a new workdir:
  `pretrain cooldown`'s checks of the parent, and the fields it would set."""
  step = cfg.train.parent_step
  if cfg.train.steps <= step:
    raise UserError(f"train.steps={cfg.train.steps} ends at or before train.parent_step={step}; make the branch with "
                    "pretrain cooldown --workdir=PARENT --from_step=S --steps=D --out=DIR")
  check_fields(cfg, config(cfg.train.parent, step, cfg.train.steps - step), "is given with train.parent")


def saved(workdir: str) -> ml_collections.ConfigDict | None:
  """The config of a branch's workdir (what `pretrain train` resumes it with: workdir.resumed_config), None where it
  holds no branch."""
  cfg = resumed_config(workdir)
  return cfg if cfg is not None and cfg.train.parent else None


def restore_parent(run, cfg) -> tuple:
  """(state, data position, spike guard record) of the parent's checkpoint at the branch point, restored into
  `run`'s (pretrain.run.Run) shapes and shardings."""
  parent, step = cfg.train.parent, cfg.train.parent_step
  saver = checkpoint.Checkpointer(os.path.join(parent, "checkpoints"), 1, move_aside=False)
  try:
    saver.check_has(step, parent, "the branch's parent no longer has its branch point, and the branch has no "
                                  "checkpoint of its own yet: start the branch again from a step the parent keeps")
    state = run.restore(saver, step, f"the checkpoint of step {step} in {parent!r}")
    position = saver.restore_data(step)
    if position is None:
      raise UserError(f"the checkpoint of step {step} in {parent!r} has no data position (written by an older "
                      "version); branch from a newer run")
    return state, position, saver.restore_guard(step)
  finally:
    saver.close()
