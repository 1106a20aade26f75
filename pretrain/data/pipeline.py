"""From a registered task to batches of packed numpy arrays for one host.

The host reads only its shard of the data (seqio ShardInfo); parallel/mesh.py
turns the per-host rows into global arrays.
"""

import jax
import seqio
import tensorflow as tf

from pretrain.errors import UserError


def batches(task: str, split: str, seq_len: int, batch_size: int, *, shuffle: bool, seed: int,
            repeat: bool, skip: int = 0):
  """A numpy iterator over this host's batches of `batch_size // process_count` rows.

  `skip` batches are passed over first, so a resumed run continues with exactly
  the batches it would have seen.
  """
  num_hosts = jax.process_count()
  if batch_size % num_hosts:
    raise UserError(f"train.batch_size={batch_size} does not divide across {num_hosts} hosts")
  dataset = seqio.get_dataset(
      task, task_feature_lengths={"targets": seq_len}, feature_converter=seqio.LMFeatureConverter(pack=True),
      dataset_split=split, shuffle=shuffle, num_epochs=None if repeat else 1,
      shard_info=seqio.ShardInfo(jax.process_index(), num_hosts) if num_hosts > 1 else None,
      seed=seed, batch_size=batch_size // num_hosts, verbose=False)
  dataset = dataset.skip(skip).prefetch(tf.data.AUTOTUNE)
  return dataset.as_numpy_iterator()
