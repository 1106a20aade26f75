"""From a registered task to batches of packed numpy arrays for one host.

The host reads only its shard of the data (seqio ShardInfo); parallel/mesh.py
turns the per-host rows into global arrays.
"""

import jax
import seqio
import tensorflow as tf

from pretrain.data.encoder_converter import EncoderFeatureConverter
from pretrain.errors import UserError

CONVERTERS = {
    "lm": lambda: seqio.LMFeatureConverter(pack=True),
    "prefix_lm": lambda: seqio.PrefixLMFeatureConverter(pack=True, loss_on_targets_only=True),
    "enc_dec": lambda: seqio.EncDecFeatureConverter(pack=True),
    "encoder": EncoderFeatureConverter,
}


def feature_lengths(data_cfg, objective) -> dict[str, int]:
  """Task feature lengths: seq_len for causal LM, inputs/targets lengths otherwise."""
  if objective.converter == "lm":
    return {"targets": data_cfg.seq_len}
  if objective.converter == "encoder":
    return {"inputs": data_cfg.seq_len, "targets": data_cfg.seq_len, "weights": data_cfg.seq_len}
  return {"inputs": data_cfg.inputs_length, "targets": data_cfg.targets_length}


def batches(task: str, split: str, lengths: dict[str, int], batch_size: int, converter: str, *, shuffle: bool,
            seed: int, repeat: bool, skip: int = 0):
  """A numpy iterator over this host's batches of `batch_size // process_count` rows.

  `skip` batches are passed over first, so a resumed run continues with exactly
  the batches it would have seen.
  """
  num_hosts = jax.process_count()
  if batch_size % num_hosts:
    raise UserError(f"train.batch_size={batch_size} does not divide across {num_hosts} hosts")
  dataset = seqio.get_dataset(
      task, task_feature_lengths=lengths, feature_converter=CONVERTERS[converter](),
      dataset_split=split, shuffle=shuffle, num_epochs=None if repeat else 1,
      shard_info=seqio.ShardInfo(jax.process_index(), num_hosts) if num_hosts > 1 else None,
      seed=seed, batch_size=batch_size // num_hosts, verbose=False)
  dataset = dataset.skip(skip).prefetch(tf.data.AUTOTUNE)
  return dataset.as_numpy_iterator()
