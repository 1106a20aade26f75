"""A training run: a config trained in a workdir, from the workdir's latest checkpoint, a cooldown branch's
parent checkpoint, a Hugging Face model (train.init_from_hf) or new parameters. `pretrain train`, `pretrain
cooldown`, sweeps and the experiments all train through `train`."""

import os

import jax
import numpy as np

from pretrain import hf, run as run_lib, workdir as workdir_lib
from pretrain.downstream import lm_eval_loader
from pretrain.system import data_cache
from pretrain.system.console import log
from pretrain.system.errors import UserError
from pretrain.train import checkpoint, goodput, loop, memory, signals
from pretrain.workdir import branch
from pretrain.workdir.lock import WorkdirLock


def train(cfg, workdir: str) -> dict:
  """Builds the run of `cfg` in `workdir` and trains it. Nothing in the workdir changes until every check
  (the config, the model against the workdir's, the checkpoint's shapes) and the restore have passed."""
  if cfg.train.init_from_hf:
    cfg = _from_hf(cfg, workdir)
  workdir_lib.check_writable(workdir)
  workdir_lib.check_layout(workdir)
  with WorkdirLock(workdir):  # JAX's backend has started (every process takes part in the lock).
    signals.sigterm_ends_at_once()
    workdir_lib.check_same_model(cfg, workdir)
    cfg = _keeping_earlier_steps(cfg, workdir)
    run = run_lib.Run.build_with_data(cfg)
    memory.check_fits(run)
    ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), cfg.train.keep_checkpoints,
                                   keep_steps=cfg.train.keep_steps)
    start = ckpt.latest_step()
    # The run's time so far, if goodput.json is its account (the run id its checkpoints record says so).
    account = goodput.Goodput(workdir, write=jax.process_index() == 0,
                              run=ckpt.run_id(start) if start is not None else None, checkpointed=start is not None)
    ckpt.records = {"run": account.run, "config": run.cfg.to_dict(),
                    "vocabulary": workdir_lib.file_sha256(run.vocabulary.file)}
    branching = start is None and bool(cfg.train.parent)  # A cooldown branch's first start.
    if branching:
      account.mark("startup")
      state, position, guard = branch.restore_parent(run, cfg)
      start = cfg.train.parent_step
      account.mark("checkpoint")
    elif start is None:
      state, start, position = initial_state(run), 0, None
      account.mark("startup")
    else:
      workdir_lib.check_resume(run, workdir, start)
      account.mark("startup")
      state = run.restore(ckpt, start, f"the checkpoint of step {start} in {workdir!r}")
      account.mark("checkpoint")
      position = ckpt.restore_data(start)
      if position is None:
        raise UserError(f"the latest checkpoint in {workdir!r} has no data position (written by an older "
                        "version); start a new workdir")
    extra_eval = None
    if cfg.train.harness_tasks:  # lm-eval's tasks during training, checked before any step.
      extra_eval = lm_eval_loader.load().InLoop(run, data_cache.cache_dir(cfg.data))
    train_batches = run.train_batches(position, start)
    workdir_lib.write_run_files(run, workdir)
    account.resumed(start)
    if branching:  # Its own first checkpoint: from here on it resumes without its parent.
      log(f"Branching from the checkpoint of step {start} in {cfg.train.parent}: {cfg.train.steps - start} steps "
          f"of {cfg.optimizer.decay_shape} decay to {cfg.optimizer.end_lr_ratio:g} x optimizer.learning_rate")
      ckpt.save(start, state, train_batches.position(), guard)
      ckpt.wait()
      account.mark("checkpoint")
      account.saved(start)
    return loop.train(run, workdir, ckpt, state, start, train_batches, account, extra_eval,
                      initial_state=lambda: initial_state(run))


def _from_hf(cfg, workdir: str):
  """`cfg` with the model and tokenizer of train.init_from_hf (hf.init_config); or, once the run has checkpoints
  and that directory is gone (a preempted machine's disk), as they record them, the vocabulary the run's own copy:
  a resume needs the directory no more."""
  saved = workdir_lib.resumed_config(workdir)
  if (saved is None or saved.train.init_from_hf != cfg.train.init_from_hf or os.path.exists(cfg.train.init_from_hf)
      or "://" in cfg.train.init_from_hf):
    return hf.init_config(cfg, run_lib.objective(cfg).family)
  copy = workdir_lib.vocabulary_file(workdir)  # The run's own, checked against what its checkpoints record.
  if not os.path.exists(copy):
    raise UserError(f"train.init_from_hf={cfg.train.init_from_hf!r} is gone, and {workdir!r} holds no copy of the "
                    "run's vocabulary", fix="restore the directory to resume")
  cfg = cfg.copy_and_resolve_references()
  cfg.model, cfg.tokenizer = saved.model, saved.tokenizer
  cfg.tokenizer.path = copy
  log(f"{cfg.train.init_from_hf} is gone: resuming with the model its import set, as the checkpoints record it, "
      f"and the run's copy of its vocabulary ({copy})")
  return cfg


def _keeping_earlier_steps(cfg, workdir: str):
  """`cfg` with the train.keep_steps its run's checkpoints recorded: a resume whose command line leaves them out
  must not delete the branch points they keep (their steps stay kept in what this run records)."""
  saved = workdir_lib.resumed_config(workdir)
  earlier = sorted(set(saved.train.keep_steps) - set(cfg.train.keep_steps)) if saved is not None else []
  if not earlier:
    return cfg
  cfg = cfg.copy_and_resolve_references()
  cfg.train.keep_steps = tuple(sorted({*cfg.train.keep_steps, *earlier}))
  log(f"Keeping the checkpoints of steps {', '.join(map(str, earlier))} (train.keep_steps of this run's earlier "
      "checkpoints); to let one go, delete its folder")
  return cfg


def initial_state(run):
  """A new train state of a run (pretrain.run.Run), its parameters from train.init_from_hf if set (the
  optimizer's moments start at zero either way)."""
  state = run.create_state()
  path = run.cfg.train.init_from_hf
  if not path:
    return state
  params = hf.import_params(path, run.family, run.cfg.model, state.params)
  params = jax.tree.map(lambda new, old: np.asarray(new, old.dtype), params, state.params)
  return state.replace(params=jax.device_put(params, run.state_shardings.params))
