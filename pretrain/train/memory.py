"""Per-device memory of a training run, from shapes and shardings alone.

Parameters and optimizer state: each leaf's shard shape under its sharding.
Activations and other temporaries: XLA's buffer assignment for the compiled
train step (compiled from abstract inputs; nothing is allocated).
"""

import math

import jax


def _shard_bytes(abstract_tree) -> int:
  """Bytes of one device's shard of every leaf (shards of a leaf are equal in size)."""
  return sum(x.dtype.itemsize * math.prod(x.sharding.shard_shape(x.shape)) for x in jax.tree.leaves(abstract_tree))


def estimate(run, compile_step: bool = True) -> dict[str, int]:
  """Bytes per device of a run (pretrain.run.Run): params, optimizer_state and (when compiled) the temporaries
  of its train step, the step training runs."""
  abstract = run.abstract_state()
  result = {"params": _shard_bytes(abstract.params), "optimizer_state": _shard_bytes(abstract.opt_state)}
  if compile_step:
    with run.activated():
      analysis = run.train_step.lower(abstract, run.abstract_batch()).compile().memory_analysis()
    result["activations_and_temporaries"] = int(analysis.temp_size_in_bytes)
  return result
