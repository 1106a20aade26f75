"""Per-device memory of a training run, from shapes and shardings alone.

Parameters and optimizer state: each leaf's shard shape under its sharding.
Activations and other temporaries: XLA's buffer assignment for the compiled
train step (compiled from abstract inputs; nothing is allocated).
"""

import math

import flax.linen as nn
import jax

from pretrain import models
from pretrain.parallel import mesh as mesh_lib
from pretrain.train import optimizer, state as state_lib, steps


def _shard_bytes(abstract_tree) -> int:
  """Bytes of one device's shard of every leaf (shards of a leaf are equal in size)."""
  return sum(x.dtype.itemsize * math.prod(x.sharding.shard_shape(x.shape)) for x in jax.tree.leaves(abstract_tree))


def estimate(cfg, model, lengths: dict[str, int], compile_step: bool = True) -> dict[str, int]:
  """Bytes per device: params, optimizer_state and (when compiled) temporaries of the train step."""
  mesh, rules = mesh_lib.make_mesh(cfg.mesh), mesh_lib.rules(cfg.mesh)
  tx = optimizer.make(cfg.optimizer, cfg.train.steps)
  example_args = models.example_args(model, lengths)
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    shardings = state_lib.shardings(model, tx, example_args, mesh, rules)
    abstract = state_lib.abstract(model, tx, example_args, shardings)
    result = {"params": _shard_bytes(abstract.params), "optimizer_state": _shard_bytes(abstract.opt_state)}
    if compile_step:
      batch_sharding = mesh_lib.batch_sharding(mesh, rules)
      batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=batch_sharding)
               for k, v in _abstract_batch(model, lengths, cfg.train.batch_size).items()}
      step = jax.jit(steps.make_train_step(model, tx, optimizer.schedule(cfg.optimizer, cfg.train.steps), cfg.loss,
                                           num_microbatches=cfg.train.get("microbatches", 1)),
                     in_shardings=(shardings, batch_sharding), out_shardings=(shardings, None), donate_argnums=0)
      analysis = step.lower(abstract, batch).compile().memory_analysis()
      result["activations_and_temporaries"] = int(analysis.temp_size_in_bytes)
  return result


def _abstract_batch(model, lengths: dict[str, int], rows: int) -> dict:
  int32 = lambda length: jax.ShapeDtypeStruct((rows, length), "int32")
  if isinstance(model, models.EncoderDecoder):
    s, t = lengths["inputs"], lengths["targets"]
    return {"encoder_input_tokens": int32(s), "encoder_segment_ids": int32(s), "decoder_input_tokens": int32(t),
            "decoder_target_tokens": int32(t), "decoder_segment_ids": int32(t), "decoder_loss_weights": int32(t)}
  length = lengths["inputs"] if isinstance(model, models.EncoderOnly) else sum(lengths.values())
  prefix = "encoder" if isinstance(model, models.EncoderOnly) else "decoder"
  names = (["encoder_input_tokens", "encoder_target_tokens", "encoder_loss_weights"]
           if prefix == "encoder" else ["decoder_input_tokens", "decoder_target_tokens", "decoder_loss_weights"])
  return {**{n: int32(length) for n in names}, f"{prefix}_segment_ids": int32(length),
          f"{prefix}_positions": int32(length)}
