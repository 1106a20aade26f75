"""Decoder-only causal LM, Llama shape, about 6.74B parameters, on C4.

Sized for 64 x H100 80GB (FSDP 16 x tensor 4): batch 1024 x 4096 tokens in 16 microbatches,
AdamW with warmup and cosine decay, bfloat16 activations and a fused attention kernel on
accelerators: about 39 GiB per device (pretrain estimate-memory --devices=64
--config=configs/lm_7b.py --config.model.dtype=bfloat16 --config.model.attention=splash).

On TPUs: compiled for a v5p-128 by libtpu, 21.9 GiB per chip of 95 (pretrain compile
--topology=v5p-128 --config=lm_7b; every zoo config: tools/zoo_compile.md).
"""

from pretrain.configs import _zoo

SIZED_FOR = _zoo.SizedFor("64 x H100 80GB", devices=64, device_gib=80, estimate_gib=39,
                          flags=("--config.model.attention=splash",), tpu="v5p-128", tpu_gib=21.9)


def get_config():
  return _zoo.apply(_zoo.c4(_zoo.base(), "clm"), {
      "model.d_model": 4096, "model.num_layers": 32, "model.num_heads": 32, "model.num_kv_heads": 32,
      "model.head_dim": 128, "model.mlp_dim": 11008, "model.tie_embeddings": False, "model.rope_theta": 10000.0,
      "model.scan_layers": True, "model.remat": "save_dots", "data.seq_len": 4096,
      "optimizer.learning_rate": 0.0003, "optimizer.warmup_steps": 2000, "optimizer.end_lr_ratio": 0.1,
      "optimizer.weight_decay": 0.1, "optimizer.b2": 0.95, "train.steps": 100_000, "train.batch_size": 1024, "train.microbatches": 16,
      "mesh.data": -1, "mesh.fsdp": 16, "mesh.tensor": 4,
  })
