"""Decoder-only UL2 (mixture of denoisers as prefix-LM examples, bidirectional prefix) at the
1.1B Llama shape, on C4.

Sized for 8 x A100 80GB: batch 512 x (1024 inputs + 1024 targets) in 8 microbatches, FSDP 8.
Its attention takes the XLA path (no kernel sees a per-example prefix): about 43 GiB per device
(pretrain estimate-memory --devices=8 --config=configs/ul2_decoder_1b.py --config.model.dtype=bfloat16).

On TPUs: compiled for a v5p-16 by libtpu, 34.0 GiB per chip of 95 (pretrain compile
--topology=v5p-16 --config=ul2_decoder_1b; every zoo config: tools/zoo_compile.md).
"""

from pretrain.configs import _zoo

SIZED_FOR = _zoo.SizedFor("8 x A100 80GB", devices=8, device_gib=80, estimate_gib=43, tpu="v5p-16", tpu_gib=34.0)


def get_config():
  return _zoo.apply(_zoo.c4(_zoo.base(), "ul2_decoder"), {
      "model.d_model": 2048, "model.num_layers": 22, "model.num_heads": 32, "model.num_kv_heads": 4,
      "model.head_dim": 64, "model.mlp_dim": 5632, "model.scan_layers": True, "model.remat": "save_dots",
      "data.inputs_length": 1024, "data.targets_length": 1024, "tokenizer.extra_ids": 300,
      "optimizer.learning_rate": 4e-4, "optimizer.warmup_steps": 2000,
      "train.steps": 100_000, "train.batch_size": 512, "train.microbatches": 8, "mesh.data": -1, "mesh.fsdp": 8,
  })
