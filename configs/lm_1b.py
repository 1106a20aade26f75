"""Decoder-only causal LM, Llama shape, about 1.1B parameters, on C4.

Sized for 8 x A100 80GB (FSDP): batch 512 x 2048 tokens in 4 microbatches, AdamW with
warmup and cosine decay, bfloat16 activations and a fused attention kernel (model.attention=auto)
on accelerators: about 64 GiB per device (pretrain estimate-memory --devices=8
--config=configs/lm_1b.py --config.model.dtype=bfloat16 --config.model.attention=splash).

On TPUs: compiled for a v5p-16 by libtpu, 39.6 GiB per chip of 95 (pretrain compile
--topology=v5p-16 --config=lm_1b; every zoo config: tools/zoo_compile.md).
"""

from pretrain.configs import _zoo

SIZED_FOR = _zoo.SizedFor("8 x A100 80GB", devices=8, device_gib=80, estimate_gib=64,
                          flags=("--config.model.attention=splash",), tpu="v5p-16", tpu_gib=39.6)


def get_config():
  return _zoo.apply(_zoo.c4(_zoo.base(), "clm"), {
      "model.d_model": 2048, "model.num_layers": 22, "model.num_heads": 32, "model.num_kv_heads": 4,
      "model.head_dim": 64, "model.mlp_dim": 5632, "model.tie_embeddings": False, "model.rope_theta": 10000.0,
      "model.scan_layers": True, "model.remat": "save_dots", "data.seq_len": 2048,
      "optimizer.learning_rate": 0.0004, "optimizer.warmup_steps": 2000, "optimizer.end_lr_ratio": 0.1,
      "optimizer.weight_decay": 0.1, "optimizer.b2": 0.95, "train.steps": 100_000, "train.batch_size": 512, "train.microbatches": 4,
      "mesh.data": -1, "mesh.fsdp": 8, "mesh.tensor": 1,
  })
