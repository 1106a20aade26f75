"""Orbax checkpoints of the train state, written asynchronously and atomically.

A checkpoint holds two items: `state` (step, parameters, optimizer state and
the RNG key, as arrays) and `data` (the input pipeline's position, as JSON),
and with train.spike_guard a third, `guard` (its statistics and rollbacks, as JSON).
The newest train.keep_checkpoints steps are kept, and those of
train.keep_steps always (the points cooldown branches start from).
Orbax writes each step to a temporary directory and renames it when complete,
so an interrupted save never replaces the last good checkpoint. Each step also
carries a manifest of its files' sizes and checksums (checksums.py), written as
the save finalizes; `latest_step` passes over a step whose files differ from it
(truncated, missing, overwritten), with a warning, for the newest intact one.
"""

import contextlib
import json
import os
import re
import shutil

import jax
from jax.experimental import multihost_utils
import orbax.checkpoint as ocp
from etils import epath
from orbax.checkpoint.checkpoint_managers import preservation_policy as preservation
from pretrain.system import aside, files
from pretrain.system.console import log
from pretrain.system.errors import UserError
from pretrain.train import checksums

# A save's size against the last one's: the optimizer's moments compress less as more of them become non-zero.
_SPACE_MARGIN = 1.1


def _cause(error: Exception) -> str:
  """The operating system's reason for a failed write inside Orbax or TensorStore, else the error's first line."""
  code = re.search(r"os_error_code='(\d+)'", str(error))
  if code:
    return os.strerror(int(code.group(1)))
  return str(error).splitlines()[0][:300] if str(error) else type(error).__name__


def _all_processes_reach(name: str) -> None:
  """A barrier of a multi-process run's processes (nothing with one)."""
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)


class Checkpointer:
  def __init__(self, directory: str, keep: int, move_aside: bool = True, keep_steps=()):
    """Keeps the newest `keep` steps, and `keep_steps` (train.keep_steps) always. `move_aside`: rename a damaged
    step to STEP.damaged-TIME (never deleted), as training does; commands that only read a run pass over it in
    place."""
    self.directory = os.path.abspath(directory) if files.local(directory) else directory
    self.move_aside = move_aside
    # What each save records beside its items, as its metadata (training sets it): the run's id (goodput.Goodput.run),
    # config and vocabulary file's SHA-256, which the workdir's files are checked against (pretrain/workdir/).
    self.records = {}
    self._saving = None  # The step whose asynchronous save is under way.
    self.manager = ocp.CheckpointManager(self.directory, options=ocp.CheckpointManagerOptions(
        preservation_policy=preservation.AnyPreservationPolicy(
            [preservation.LatestN(keep), preservation.CustomSteps(tuple(keep_steps))]),
        # A save killed midway leaves STEP.orbax-checkpoint-tmp*, which a step of another schedule never replaces:
        # training (the workdir's one writer) removes them; a command that reads a run beside it must not.
        create=True, enable_async_checkpointing=True, cleanup_tmp_directories=move_aside,
        async_options=ocp.AsyncOptions(post_finalization_callback=self._write_manifest)))

  def _write_manifest(self) -> None:
    """Runs in Orbax's saving thread once the step's files are complete, before it is renamed into place."""
    if jax.process_index() != 0 or self._saving is None:
      return
    final = os.path.join(self.directory, str(self._saving))
    temporary = [p for p in files.glob(f"{final}.*") if ".damaged-" not in p]
    checksums.write(temporary[0] if temporary else final)

  def latest_step(self) -> int | None:
    """The newest step whose files are as written. Damaged newer ones are named in a warning and moved aside;
    with none intact, nothing is moved and the error says so."""
    damaged = {}
    for step in sorted(self.manager.all_steps(), reverse=True):
      problem = checksums.problem(os.path.join(self.directory, str(step)))
      if not problem:
        break
      damaged[step] = f"step {step} {problem}"
    else:
      if damaged:
        raise UserError(f"no intact checkpoint in {self.directory} ({'; '.join(damaged.values())}); restore "
                        "them from a copy, or start a new --workdir")
      return None
    if damaged:
      if self.move_aside:
        # Every process found the same damage (one shared directory): they finish reading it before process 0
        # moves it, then all forget it, or a process whose manager still knew the damaged step would skip the
        # saves up to it while process 0 waits for it in each.
        _all_processes_reach("checkpoints checked")
        if jax.process_index() == 0:
          for bad in damaged:
            path = os.path.join(self.directory, str(bad))
            aside_path = aside.name(path)
            files.rename(path, aside_path)
            damaged[bad] += f", moved to {aside_path}"
        _all_processes_reach("damaged checkpoints moved aside")
        self.manager.reload()
      log(f"warning: the checkpoint of {'; '.join(damaged.values())}; "
          + f"{'resuming from' if self.move_aside else 'using'} step {step}")
    return step

  def check_has(self, step: int, run: str, fix: str = "") -> None:
    """Refuses a `step` that `run` (its workdir, to name) holds no intact checkpoint of, naming those it keeps;
    `fix`: what the user may do about it."""
    kept = sorted(self.manager.all_steps())
    if step not in kept:
      raise UserError(f"{run!r} has no checkpoint of step {step}; it keeps "
                      + (f"steps {', '.join(map(str, kept))}" if kept else "none yet") + (f"; {fix}" if fix else ""))
    problem = checksums.problem(os.path.join(self.directory, str(step)))
    if problem:
      raise UserError(f"the checkpoint of step {step} in {run!r} {problem}; restore it from a copy, or use "
                      "another step")

  def save(self, step: int, state, data: dict | None = None, guard: dict | None = None) -> None:
    """Starts an asynchronous save of the state, the data position and the spike guard's record; training
    continues while it is written. A save that cannot fit in the free space is refused before anything is written."""
    items = {"state": ocp.args.StandardSave(state)}
    for name, item in (("data", data), ("guard", guard)):
      if item is not None:
        items[name] = ocp.args.JsonSave(item)
    self.wait()  # Orbax would too: one save at a time, so _saving names it.
    self._check_free_space(step, state)
    self._saving = step
    with self._failures():
      self.manager.save(step, args=ocp.args.Composite(**items), custom_metadata=self.records or None)

  def _intact(self) -> str:
    self.manager.reload()
    latest = self.manager.latest_step()
    return f"the checkpoint of step {latest} is intact" if latest is not None else "no checkpoint had been written"

  def _check_free_space(self, step: int, state) -> None:
    """Refuses a save that a local disk cannot hold: about the size of the newest checkpoint (its manifest's
    sizes), or before the first one this process's shards of the state (an upper bound: Orbax compresses)."""
    if not files.local(self.directory):
      return
    latest = self.manager.latest_step()
    written = checksums.size(os.path.join(self.directory, str(latest))) if latest is not None else None
    needed = written * _SPACE_MARGIN if written else sum(
        shard.data.nbytes for leaf in jax.tree.leaves(state) for shard in leaf.addressable_shards
        if shard.replica_id == 0)
    free = shutil.disk_usage(self.directory).free
    if free < needed:
      # Older steps go only after a save succeeds, so a lower train.keep_checkpoints frees nothing before it.
      older = [os.path.join(self.directory, str(s)) for s in sorted(self.manager.all_steps()) if s != latest]
      raise UserError(f"not enough free space in {self.directory} for the checkpoint of step {step}: it needs about "
                      f"{needed / 2**20:,.1f} MiB and {free / 2**20:,.1f} MiB are free ({self._intact()})",
                      fix="free space" + (f" (the run resumes from the newest checkpoint; the older "
                                          f"{', '.join(older)} may go)" if older else "") + ", then rerun to resume")

  def wait(self) -> None:
    """Waits for a pending save."""
    with self._failures():
      self.manager.wait_until_finished()

  @contextlib.contextmanager
  def _failures(self):
    """A failed save (a full disk, a lost mount), raised as it starts or when it is waited for, leaves no partial
    step behind and ends in one line naming the directory and the cause."""
    try:
      yield
    except Exception as e:  # pylint: disable=broad-except  (Orbax and TensorStore raise many types)
      step, self._saving = self._saving, None
      for partial in files.glob(os.path.join(self.directory, f"{step}.orbax-checkpoint-tmp*")):
        files.remove_tree(partial)
      raise UserError(f"the checkpoint of step {step} could not be written to {self.directory} ({_cause(e)}); "
                      f"{self._intact()}", fix="fix the cause (free space, permissions, the mount), then rerun to "
                      "resume") from None

  def recorded(self, step: int) -> dict:
    """What the save of `step` recorded (records: {} before checkpoints recorded anything)."""
    found = self.manager.metadata(step).custom_metadata
    return found if isinstance(found, dict) else {}

  def run_id(self, step: int) -> str | None:
    """The id of the run that saved `step` (None: saved before checkpoints recorded one)."""
    run = self.recorded(step).get("run")
    return run if isinstance(run, str) else None

  def restore(self, step: int, abstract_state):
    """The state, restored into the shapes, dtypes and shardings of `abstract_state`."""
    return self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state))).state

  def restore_params(self, step: int, abstract_params):
    """The parameters alone, restored into the shapes, dtypes and shardings of `abstract_params`: what reads a
    run (export, eval, generate) holds no optimizer state, two or three times the parameters' memory."""
    item = {"params": abstract_params}
    args = ocp.args.PyTreeRestore(item=item, restore_args=ocp.checkpoint_utils.construct_restore_args(item),
                                  partial_restore=True)
    return ocp.PyTreeCheckpointer().restore(epath.Path(self.directory, str(step), "state"), args=args)["params"]

  def restore_data(self, step: int) -> dict | None:
    """The data position saved at `step` (None if the checkpoint has none)."""
    return self._restore_json(step, "data")

  def restore_guard(self, step: int) -> dict | None:
    """The spike guard's record saved at `step` (None if the checkpoint has none: the guard was off)."""
    return self._restore_json(step, "guard")

  def _restore_json(self, step: int, item: str) -> dict | None:
    if not files.exists(os.path.join(self.directory, str(step), item)):
      return None
    return self.manager.restore(step, args=ocp.args.Composite(**{item: ocp.args.JsonRestore()}))[item]

  def delete_after(self, step: int) -> None:
    """Deletes the checkpoints of steps after `step` (a spike guard's rollback: they hold the bad window)."""
    self.wait()
    for newer in sorted(self.manager.all_steps()):
      if newer > step:
        self.manager.delete(newer)

  def saved_params(self, step: int):
    """Shapes and dtypes of the parameters saved at `step`, read without restoring them."""
    # The item's handler, not a Checkpointer: that would look for (and warn of) a step's metadata in the item.
    return ocp.StandardCheckpointHandler().metadata(epath.Path(self.directory, str(step), "state"))["params"]

  def close(self) -> None:
    """Waits for pending saves to finish."""
    self.wait()
    self.manager.close()


def recorded_config(directory: str) -> dict | None:
  """The config (as JSON's dict) that the newest readable checkpoint in `directory` recorded; None where there is
  none, or it was saved before checkpoints recorded it."""
  return _newest_record(directory, "config", dict)


def recorded_vocabulary(directory: str) -> str | None:
  """The SHA-256 of the vocabulary file that the newest readable checkpoint in `directory` recorded (None: none,
  or saved before checkpoints recorded it)."""
  return _newest_record(directory, "vocabulary", str)


def recorded_run(directory: str) -> str | None:
  """The run id that the newest readable checkpoint in `directory` recorded (None: none)."""
  return _newest_record(directory, "run", str)


# Where Orbax keeps a step's metadata, the records among it (Checkpointer.save's custom_metadata).
_STEP_METADATA, _RECORDS = "_CHECKPOINT_METADATA", "custom_metadata"


def _newest_record(directory: str, key: str, kind: type):
  """Read from the steps' metadata files, not through an Orbax manager: a command reads it before it starts JAX
  (a multi-process run's jax.distributed.initialize must come first)."""
  if not files.exists(directory):
    return None
  names = (os.path.basename(path.rstrip("/")) for path in files.glob(os.path.join(directory, "*")))
  steps = sorted((int(name) for name in names if name.isdigit()), reverse=True)
  for step in steps:
    try:
      found = json.loads(files.read_text(os.path.join(directory, str(step), _STEP_METADATA)))[_RECORDS].get(key)
    except (*files.errors(), ValueError, KeyError, TypeError, AttributeError):  # Not committed, or damaged.
      continue
    return found if isinstance(found, kind) else None
  return None
