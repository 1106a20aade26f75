"""Per-device memory of a training run, from shapes and shardings alone.

Parameters and optimizer state: each leaf's shard shape under its sharding.
Activations and other temporaries: XLA's buffer assignment for the compiled
train step (compiled from abstract inputs; nothing is allocated).
"""

import math
import os

import jax
import jax.numpy as jnp

from pretrain.models import attention
from pretrain.parallel import mesh as mesh_lib
from pretrain.system.errors import UserError


def shard_bytes(abstract_tree) -> int:
  """Bytes of one device's shard of every leaf (shards of a leaf are equal in size)."""
  return sum(x.dtype.itemsize * math.prod(x.sharding.shard_shape(x.shape)) for x in jax.tree.leaves(abstract_tree))


def estimate(run, compile_step: bool = True) -> dict[str, int]:
  """Bytes per device of a run (pretrain.run.Run): params, optimizer_state and (when compiled) the temporaries
  of its train step, the step training runs."""
  abstract = run.abstract_state()
  result = {"params": shard_bytes(abstract.params), "optimizer_state": shard_bytes(abstract.opt_state)}
  if compile_step:
    with run.activated():
      analysis = run.train_step.lower(abstract, run.abstract_batch()).compile().memory_analysis()
    result["activations_and_temporaries"] = int(analysis.temp_size_in_bytes)
  return result


def device_bytes() -> int:
  """Memory of one local device: its allocator's limit on GPUs and TPUs; on CPUs, the host's RAM shared by them."""
  stats = jax.local_devices()[0].memory_stats()
  if stats and stats.get("bytes_limit"):
    return int(stats["bytes_limit"])
  return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // jax.local_device_count()


def _microbatch_rows(run) -> int:
  c = run.cfg
  return max(c.train.batch_size // (c.train.microbatches * run.data_shards), 1)


def attention_scores(run) -> dict[str, int]:
  """Bytes per device of what the attention keeps per query for its backward pass, by implementation
  (models/attention.py): the XLA path its float32 [L, S] probabilities, a kernel its float32 log-sum-exp.
  Each layer's, or under model.remat one layer's at a time (recomputed in the backward pass). A context axis
  splits the queries."""
  m = run.cfg.model
  heads = max(m.num_heads // run.mesh.shape["tensor"], 1)
  split = mesh_lib.length_split(run.mesh, run.rules)
  result = {}
  for query, key, layers, what in run.family.attentions(m, run.task_lengths):
    with run.activated():  # The choice reads the mesh (its platform, its context axis).
      name = attention.choose(m.attention, query, key, **what)
    held = 1 if m.remat != "none" else layers
    result[name] = result.get(name, 0) + (_microbatch_rows(run) * heads * query // split
                                          * (key if name == "xla" else 1) * 4 * held)
  return result


def pipeline_inputs(run) -> int:
  """Bytes per device of what a pipeline (models/pipeline.py) keeps of every iteration for its backward pass,
  at the least: its stage's input, one microbatch's activations [rows, L, D] (under model.remat, all it keeps of
  an iteration). 0 without a stage axis."""
  schedule = run.pipeline
  if schedule is None:
    return 0
  c = run.model.config
  length = run.family.row_lengths(run.task_lengths)["targets"] // mesh_lib.length_split(run.mesh, run.rules)
  return (schedule.iterations(schedule.microbatches) * _microbatch_rows(run) * length * c.d_model
          * jnp.dtype(c.dtype).itemsize)


def lower_bound(run) -> int:
  """Bytes per device that the train step needs at the least: its state's shards, the float32 logits of one
  microbatch, the attention's scores and a pipeline's stage inputs (XLA's real figure, from `estimate`, is
  higher)."""
  row = run.family.row_lengths(run.task_lengths)
  logits = (_microbatch_rows(run) * row["targets"] // mesh_lib.length_split(run.mesh, run.rules)
            * run.model.config.vocab_size * 4)
  abstract = run.abstract_state()
  return (shard_bytes(abstract.params) + shard_bytes(abstract.opt_state) + logits
          + sum(attention_scores(run).values()) + pipeline_inputs(run))


def check_fits(run) -> None:
  """Refuses, before anything is compiled, a run that cannot fit in its devices' memory."""
  needed, available = lower_bound(run), device_bytes()
  if needed > available:
    raise UserError(f"this run needs at least {needed / 2**30:,.1f} GiB per device (parameters, optimizer state, "
                    f"logits and attention scores of one microbatch, a pipeline's stage inputs) but a device has {available / 2**30:,.1f} GiB; "
                    "lower data.seq_len (or inputs_length, targets_length) or train.batch_size, raise "
                    "train.microbatches or shard over more devices (pretrain estimate-memory sizes a config)")
