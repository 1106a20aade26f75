"""T5 v1.1 base (248M parameters): span corruption on C4, T5's recipe.

Sized for v4-8 or 4 x A100 40GB: batch 128 x (512 inputs, 114 targets), Adafactor with
T5's inverse-square-root schedule, 524,288 (2^19) steps as T5.
"""

import _zoo  # pylint: disable=import-error  (configs/ is on the path when this file is loaded)


def get_config():
  return _zoo.apply(_zoo.c4(_zoo.base(), "span_corruption"), {
      "model.d_model": 768, "model.mlp_dim": 2048, "model.num_heads": 12, "model.num_kv_heads": 12, "model.head_dim": 64,
      "model.num_layers": 12, "model.num_decoder_layers": 12, "model.dropout": 0.0,
      "model.scan_layers": True, "model.remat": "none",
      "data.inputs_length": 512, "data.targets_length": 114,
      "optimizer.name": "adafactor", "optimizer.schedule": "rsqrt", "optimizer.learning_rate": 0.01,
      "optimizer.warmup_steps": 10_000, "optimizer.weight_decay": 0.0, "loss.z_loss": 1e-4,
      "train.steps": 524_288, "train.batch_size": 128,
      "mesh.data": -1, "mesh.fsdp": 1, "mesh.tensor": 1,
  })
