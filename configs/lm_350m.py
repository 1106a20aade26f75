"""Decoder-only causal LM, Llama shape, about 350M parameters, on C4.

Sized for 8 x A100 40GB (or a v4-16, 8 chips): batch 256 x 2048 tokens in 4 microbatches,
full rematerialisation (13.0 GiB per device on 8, by pretrain estimate-memory
--devices=8 --config.model.dtype=bfloat16), AdamW with warmup and cosine decay,
bfloat16 activations on accelerators.

On TPUs: compiled for a v4-16 by libtpu, 11.5 GiB per chip of 32 (pretrain compile
--topology=v4-16 --config=lm_350m; every zoo config: tools/zoo_compile.md).
"""

from pretrain.configs import _zoo

SIZED_FOR = _zoo.SizedFor("8 x A100 40GB", devices=8, device_gib=40, estimate_gib=13.0, tpu="v4-16", tpu_gib=11.5)


def get_config():
  return _zoo.apply(_zoo.c4(_zoo.base(), "clm"), {
      "model.d_model": 1024, "model.num_layers": 24, "model.num_heads": 16, "model.num_kv_heads": 16,
      "model.head_dim": 64, "model.mlp_dim": 2816, "model.tie_embeddings": True, "model.rope_theta": 10000.0,
      "model.scan_layers": True, "model.remat": "full", "data.seq_len": 2048,
      "optimizer.learning_rate": 0.0003, "optimizer.warmup_steps": 2000, "optimizer.end_lr_ratio": 0.1,
      "optimizer.weight_decay": 0.1, "optimizer.b2": 0.95, "train.steps": 100_000, "train.batch_size": 256, "train.microbatches": 4,
      "mesh.data": -1, "mesh.fsdp": 1, "mesh.tensor": 1,
  })
