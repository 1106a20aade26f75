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


HOST_SHARDING = ("source", "examples")


def batches(task: str, split: str, lengths: dict[str, int], batch_size: int, converter: str, *, shuffle: bool,
            seed: int, repeat: bool, skip_examples: int = 0, host_sharding: str = "source"):
  """A numpy iterator over this host's batches of `batch_size // process_count` rows.

  host_sharding 'source': each host reads and prepares only its shard of the
  documents (scales with the number of hosts). 'examples': each host prepares
  the whole stream and keeps every n-th example, so the global batches are
  the same for any number of hosts (rows in another order), at the cost of
  preparing everything everywhere.
  The first `skip_examples` examples of the global stream are passed over, so a
  resumed run continues with exactly the examples it would have seen, also
  with another batch size.
  """
  num_hosts = jax.process_count()
  if batch_size % num_hosts:
    raise UserError(f"train.batch_size={batch_size} does not divide across {num_hosts} hosts")
  if host_sharding not in HOST_SHARDING:
    raise UserError(f"data.host_sharding={host_sharding!r} is unknown; use one of {', '.join(HOST_SHARDING)}")
  by_source = host_sharding == "source" and num_hosts > 1
  dataset = seqio.get_dataset(
      task, task_feature_lengths=lengths, feature_converter=CONVERTERS[converter](),
      dataset_split=split, shuffle=shuffle, num_epochs=None if repeat else 1,
      shard_info=seqio.ShardInfo(jax.process_index(), num_hosts) if by_source else None,
      seed=seed, batch_size=None, verbose=False)
  if not by_source:
    dataset = dataset.shard(num_hosts, jax.process_index())
  dataset = dataset.skip(skip_examples // num_hosts).batch(batch_size // num_hosts, drop_remainder=True)
  dataset = dataset.prefetch(tf.data.AUTOTUNE)
  return dataset.as_numpy_iterator()
