"""The replay pipeline (data.pipeline=replay): from a registered task's seqio stream to batches of packed numpy
arrays for one host, resumed by passing over the examples read before.

The host reads only its shard of the data (seqio ShardInfo); parallel/mesh.py
turns the per-host rows into global arrays. pretrain/data/indexed.py is the
pipeline that resumes in constant time.
"""

import jax

from pretrain.data import packing
from pretrain.system import errors, tf_loader
from pretrain.system.console import log
from pretrain.system.errors import UserError

tf = tf_loader.Lazy("tensorflow")
seqio = tf_loader.Lazy("seqio")


def batches(task: str, split: str, lengths: dict[str, int], batch_size: int, family, *, shuffle: bool,
            seed: int, repeat: bool, skip_examples: int = 0, host_sharding: str = "source", whole: bool = False,
            share=None):
  """A numpy iterator over this process's block of each batch, `batch_size // share.count` rows (share:
  Run.data_share; None: one block per process), packed by the
  feature converter of `family` (pretrain.families) as seqio packs, in numpy (data/packing.py).

  host_sharding 'source': each block's processes read and prepare only its shard of the
  documents (scales with the number of hosts). 'examples': each process prepares
  the whole stream and keeps every n-th example, so the global batches are
  the same for any number of blocks (rows in another order), at the cost of
  preparing everything everywhere.
  The first `skip_examples` examples of the global stream are passed over, so a
  resumed run continues with exactly the examples it would have seen, also
  with another batch size.
  `whole` (one pass, repeat=False): the last rows fill a batch padded with empty rows (no tokens, no loss)
  instead of being dropped, so that every token of the split is read once (a whole split's evaluation).
  """
  block, blocks = share or (jax.process_index(), jax.process_count())
  if batch_size % blocks:
    raise UserError(f"train.batch_size={batch_size} does not divide into the {blocks} blocks of rows that the "
                    "processes read; use a multiple of it")
  by_source = host_sharding == "source" and blocks > 1
  # try_in_mem_cache=False: seqio would cache a small source's raw text in memory, and discard it with a warning
  # whenever a read stops early (an evaluation's first batches, the end of a run); the text is cheap to reread.
  dataset = seqio.get_mixture_or_task(task).get_dataset(
      lengths, split=split, shuffle=shuffle, seed=seed, num_epochs=None if repeat else 1,
      shard_info=seqio.ShardInfo(block, blocks) if by_source else None, try_in_mem_cache=False)
  dataset = packing.numpy_packing(family.converter())(dataset, task_feature_lengths=lengths)
  if not by_source:
    dataset = dataset.shard(blocks, block)
  rows = batch_size // blocks
  dataset = dataset.skip(skip_examples // blocks).batch(rows, drop_remainder=not (whole and not repeat))
  if whole and not repeat:
    dataset = dataset.map(lambda batch: {k: _pad_rows(v, rows) for k, v in batch.items()})
  dataset = dataset.prefetch(tf.data.AUTOTUNE)
  return dataset.as_numpy_iterator()


def _pad_rows(tensor: tf.Tensor, rows: int) -> tf.Tensor:
  """`tensor` [r, ...] with zero rows appended up to `rows`."""
  padding = [[0, rows - tf.shape(tensor)[0]]] + [[0, 0]] * (len(tensor.shape) - 1)
  return tf.ensure_shape(tf.pad(tensor, padding), [rows, *tensor.shape[1:]])


class ReplayBatches:
  """data.pipeline=replay: the task's seqio stream, resumed by passing over the examples a checkpoint counts (in
  time that grows with the step; pretrain/data/indexed.py resumes in constant time)."""

  def __init__(self, task: str, lengths: dict[str, int], family, *, batch_size: int, seed: int, host_sharding: str,
               share, position: dict | None = None):
    self._task, self._batch_size, self._blocks = task, batch_size, share.count
    self._examples = self._examples_to_skip(task, host_sharding, share.count, position) if position else 0
    self._batches = batches(task, "train", lengths, batch_size, family, shuffle=True, seed=seed, repeat=True,
                            skip_examples=self._examples, host_sharding=host_sharding, share=share)

  def __iter__(self):
    return self

  def __next__(self) -> dict:
    try:
      batch = next(self._batches)
    except tf.errors.OpError as e:  # Raised in tf.data's threads (a damaged file of the source).
      raise errors.carried(e, "reading the training data") from None
    self._examples += self._batch_size
    return batch

  def continue_at(self, step: int) -> None:
    """As IndexedBatches.continue_at: the stream reads on (nothing here depends on the step)."""
    del step

  def position(self) -> dict:
    """What a checkpoint records of the input: the task and how many of its training examples were read."""
    return {"task": self._task, "examples": self._examples, "batch_size": self._batch_size,
            "processes": self._blocks}  # The blocks of rows read apart (one per process unless some share one).

  @staticmethod
  def _examples_to_skip(task: str, host_sharding: str, blocks: int, position: dict) -> int:
    """Training examples to pass over on resuming: those of the saved position, if its task is this run's."""
    if position.get("pipeline") == "indexed":
      raise UserError("the latest checkpoint's data position is of data.pipeline=indexed; resume it with "
                      "--config.data.pipeline=indexed")
    if position["task"] != task:
      log(f"The data changed from {position['task']} to {task}: reading {task} from its start.")
      return 0
    if position["processes"] != blocks and host_sharding == "source":
      log(f"The checkpoint's batches were read in {position['processes']} blocks of rows and these in {blocks}: "
          "with data.host_sharding=source each block's order of examples changes (use 'examples' to keep it).")
    return position["examples"]
