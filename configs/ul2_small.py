"""UL2 at T5 v1.1 small's shape (77M parameters): the mixture of denoisers, encoder-decoder, on C4.

Sized for 1 x A100 40GB (or a v4-8): batch 128 x (512 inputs, 512 targets) in 4 microbatches (about
30 GiB on one device, by pretrain estimate-memory --config.model.dtype=bfloat16).

On TPUs: compiled for a v4-8 by libtpu, 7.4 GiB per chip of 32 (pretrain compile
--topology=v4-8 --config=ul2_small; every zoo config: tools/zoo_compile.md).
"""

from pretrain.configs import _zoo

SIZED_FOR = _zoo.SizedFor("1 x A100 40GB", devices=1, device_gib=40, estimate_gib=30, tpu="v4-8", tpu_gib=7.4)


def get_config():
  return _zoo.apply(_zoo.c4(_zoo.base(), "ul2"), {
      "model.d_model": 512, "model.num_layers": 8, "model.num_decoder_layers": 8, "model.num_heads": 6, "model.num_kv_heads": 6,
      "model.head_dim": 64, "model.mlp_dim": 1024, "model.scan_layers": True,
      "data.inputs_length": 512, "data.targets_length": 512, "tokenizer.extra_ids": 200,
      "optimizer.name": "adafactor", "optimizer.schedule": "rsqrt", "optimizer.learning_rate": 0.01,
      "optimizer.warmup_steps": 10_000, "optimizer.weight_decay": 0.0,
      "train.steps": 500_000, "train.batch_size": 128, "train.microbatches": 4, "mesh.data": -1,
  })
