"""Decoder-only causal LM, Llama shape, about 125M parameters, on C4.

Sized for 8 x A100 40GB (or a v4-16, 8 chips): batch 256 x 2048 tokens in 4 microbatches,
full rematerialisation (7.4 GiB per device on 8, by pretrain estimate-memory
--devices=8 --config.model.dtype=bfloat16; on 1 x A100 40GB, set
train.microbatches=32), AdamW with warmup and cosine decay, bfloat16
activations on accelerators.

On TPUs: compiled for a v4-16 by libtpu, 6.1 GiB per chip of 32 (pretrain compile
--topology=v4-16 --config=lm_125m; every zoo config: tools/zoo_compile.md).
"""

from pretrain.configs import _zoo

SIZED_FOR = _zoo.SizedFor("8 x A100 40GB", devices=8, device_gib=40, estimate_gib=7.4, tpu="v4-16", tpu_gib=6.1)


def get_config():
  return _zoo.apply(_zoo.c4(_zoo.base(), "clm"), {
      "model.d_model": 768, "model.num_layers": 12, "model.num_heads": 12, "model.num_kv_heads": 12,
      "model.head_dim": 64, "model.mlp_dim": 2560, "model.tie_embeddings": True, "model.rope_theta": 10000.0,
      "model.scan_layers": True, "model.remat": "full", "data.seq_len": 2048,
      "optimizer.learning_rate": 0.0006, "optimizer.warmup_steps": 2000, "optimizer.end_lr_ratio": 0.1,
      "optimizer.weight_decay": 0.1, "optimizer.b2": 0.95, "train.steps": 100_000, "train.batch_size": 256, "train.microbatches": 4,
      "mesh.data": -1, "mesh.fsdp": 1, "mesh.tensor": 1,
  })
