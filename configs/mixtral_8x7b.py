"""Decoder-only causal LM of Mixtral 8x7B's shape: 32 layers, each feed-forward layer 8 SwiGLU experts of width
14336 with 2 per token, grouped-query attention (32 query, 8 key/value heads), rope theta 1e6; about 46.7B
parameters, 12.9B active per token; on C4.

Sized for 256 x H100 80GB (FSDP 16 x expert 4 x tensor 4): batch 1024 x 4096 tokens in 16 microbatches, AdamW
with warmup and cosine decay, bfloat16 parameters and activations, saved matmul outputs only, dropless experts
(each device sorts its own tokens and runs its 2 experts' slices): about 17.2 GiB per device (pretrain
estimate-memory --devices=256 --config=configs/mixtral_8x7b.py --config.model.dtype=bfloat16
--config.model.attention=splash --config.model.moe_grouped_matmul=ragged_dot). With capacity dispatch instead
(--config.model.moe_capacity_factor=1.25) it takes 24.2 GiB.

On TPUs: compiled for a v5p-512 by libtpu, 9.4 GiB per chip of 95 (pretrain compile
--topology=v5p-512 --config=mixtral_8x7b; every zoo config: tools/zoo_compile.md).
"""

from pretrain.configs import _zoo

SIZED_FOR = _zoo.SizedFor("256 x H100 80GB", devices=256, device_gib=80, estimate_gib=17.2,
                          flags=("--config.model.attention=splash", "--config.model.moe_grouped_matmul=ragged_dot"), tpu="v5p-512", tpu_gib=9.4)


def get_config():
  return _zoo.apply(_zoo.c4(_zoo.base(), "clm"), {
      "model.d_model": 4096, "model.num_layers": 32, "model.num_heads": 32, "model.num_kv_heads": 8,
      "model.head_dim": 128, "model.mlp_dim": 14336, "model.tie_embeddings": False, "model.rope_theta": 1e6,
      "model.moe_experts": 8, "model.moe_top_k": 2, "model.norm_eps": 1e-5,
      "model.scan_layers": True, "model.remat": "save_dots",
      "model.param_dtype": "bfloat16", "data.seq_len": 4096, "loss.moe_load_balance": 0.02, "loss.moe_z_loss": 0.0,
      "optimizer.learning_rate": 0.0003, "optimizer.warmup_steps": 2000, "optimizer.end_lr_ratio": 0.1,
      "optimizer.weight_decay": 0.1, "optimizer.b2": 0.95, "train.steps": 100_000, "train.batch_size": 1024,
      "train.microbatches": 16, "mesh.data": -1, "mesh.fsdp": 16, "mesh.expert": 4, "mesh.tensor": 4,
  })
