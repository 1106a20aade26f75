"""UL2 20B: the paper's encoder-decoder (32 + 32 layers, d_model 4096, 16 heads of 256,
d_ff 16384) with its mixture of denoisers and mode tokens, on C4.

Sized for 256 x H100 80GB (or a v4-512): batch 1024 x (512 inputs, 512 targets), FSDP 32 x tensor 8, Adafactor
with the rsqrt schedule: about 21.9 GiB per device (pretrain estimate-memory --devices=256
--config=configs/ul2_20b.py --config.model.dtype=bfloat16).

On TPUs: compiled for a v4-512 by libtpu, 17.0 GiB per chip of 32 (pretrain compile
--topology=v4-512 --config=ul2_20b; every zoo config: tools/zoo_compile.md).
"""

from pretrain.configs import _zoo

SIZED_FOR = _zoo.SizedFor("256 x H100 80GB", devices=256, device_gib=80, estimate_gib=21.9, tpu="v4-512", tpu_gib=17.0)


def get_config():
  return _zoo.apply(_zoo.c4(_zoo.base(), "ul2"), {
      "model.d_model": 4096, "model.num_layers": 32, "model.num_decoder_layers": 32, "model.num_heads": 16, "model.num_kv_heads": 16,
      "model.head_dim": 256, "model.mlp_dim": 16384, "model.scan_layers": True, "model.remat": "full",
      "data.inputs_length": 512, "data.targets_length": 512, "tokenizer.extra_ids": 200,
      "optimizer.name": "adafactor", "optimizer.schedule": "rsqrt", "optimizer.learning_rate": 0.01,
      "optimizer.warmup_steps": 10_000, "optimizer.weight_decay": 0.0,
      "train.steps": 2_000_000, "train.batch_size": 1024,
      "mesh.data": -1, "mesh.fsdp": 32, "mesh.tensor": 8,
  })
