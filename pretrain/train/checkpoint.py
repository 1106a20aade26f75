"""Orbax checkpoints of the train state, written asynchronously and atomically.

Orbax writes each step to a temporary directory and renames it when complete,
so an interrupted save never replaces the last good checkpoint.
"""

import os

import orbax.checkpoint as ocp


class Checkpointer:
  def __init__(self, directory: str, keep: int):
    self.manager = ocp.CheckpointManager(
        os.path.abspath(directory),
        options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, enable_async_checkpointing=True))

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def save(self, step: int, state) -> None:
    """Starts an asynchronous save; training continues while it is written."""
    self.manager.save(step, args=ocp.args.StandardSave(state))

  def restore(self, step: int, abstract_state):
    """Restores into the shapes, dtypes and shardings of `abstract_state`."""
    return self.manager.restore(step, args=ocp.args.StandardRestore(abstract_state))

  def saved_params(self, step: int):
    """Shapes and dtypes of the parameters saved at `step`, read without restoring them."""
    path = os.path.join(self.manager.directory, str(step), "default")
    return ocp.StandardCheckpointer().metadata(path).item_metadata["params"]

  def close(self) -> None:
    """Waits for pending saves to finish."""
    self.manager.wait_until_finished()
    self.manager.close()
