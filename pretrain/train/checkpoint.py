"""Orbax checkpoints of the train state, written asynchronously and atomically.

A checkpoint holds two items: `state` (step, parameters, optimizer state and
the RNG key, as arrays) and `data` (the input pipeline's position, as JSON).
Orbax writes each step to a temporary directory and renames it when complete,
so an interrupted save never replaces the last good checkpoint.
"""

import os

import orbax.checkpoint as ocp

from pretrain import files


class Checkpointer:
  def __init__(self, directory: str, keep: int):
    self.manager = ocp.CheckpointManager(
        os.path.abspath(directory) if files.local(directory) else directory,
        options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, enable_async_checkpointing=True))

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def save(self, step: int, state, data: dict | None = None) -> None:
    """Starts an asynchronous save of the state and the data position; training continues while it is written."""
    items = {"state": ocp.args.StandardSave(state)}
    if data is not None:
      items["data"] = ocp.args.JsonSave(data)
    self.manager.save(step, args=ocp.args.Composite(**items))

  def restore(self, step: int, abstract_state):
    """The state, restored into the shapes, dtypes and shardings of `abstract_state`."""
    return self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state))).state

  def restore_data(self, step: int) -> dict | None:
    """The data position saved at `step` (None if the checkpoint has none)."""
    if not files.exists(os.path.join(str(self.manager.directory), str(step), "data")):
      return None
    return self.manager.restore(step, args=ocp.args.Composite(data=ocp.args.JsonRestore())).data

  def saved_params(self, step: int):
    """Shapes and dtypes of the parameters saved at `step`, read without restoring them."""
    path = os.path.join(str(self.manager.directory), str(step), "state")
    return ocp.StandardCheckpointer().metadata(path).item_metadata["params"]

  def close(self) -> None:
    """Waits for pending saves to finish."""
    self.manager.wait_until_finished()
    self.manager.close()
