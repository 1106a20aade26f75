"""T5 v1.1 XXL (11.3B parameters): span corruption on C4, T5's recipe.

Sized for v4-256 or 64 x H100 (FSDP x tensor 8): batch 128 x (512 inputs, 114 targets), Adafactor with
T5's inverse-square-root schedule, 524,288 (2^19) steps as T5.
"""

import _zoo  # pylint: disable=import-error  (configs/ is on the path when this file is loaded)


def get_config():
  return _zoo.apply(_zoo.c4(_zoo.base(), "span_corruption"), {
      "model.d_model": 4096, "model.mlp_dim": 10240, "model.num_heads": 64, "model.num_kv_heads": 64, "model.head_dim": 64,
      "model.num_layers": 24, "model.num_decoder_layers": 24, "model.dropout": 0.0,
      "model.scan_layers": True, "model.remat": "full",
      "data.inputs_length": 512, "data.targets_length": 114,
      "optimizer.name": "adafactor", "optimizer.schedule": "rsqrt", "optimizer.learning_rate": 0.01,
      "optimizer.warmup_steps": 10_000, "optimizer.weight_decay": 0.0, "loss.z_loss": 1e-4,
      "train.steps": 524_288, "train.batch_size": 128,
      "mesh.data": -1, "mesh.fsdp": 8, "mesh.tensor": 8,
  })
