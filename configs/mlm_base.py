"""A BERT-base-sized masked-language-model encoder (12 layers, d_model 768, 12 heads), on C4.

Sized for 8 x A100 40GB: batch 256 x 512 tokens, 15% masking (80/10/10): about 32.4 GiB per device
(pretrain estimate-memory --devices=8 --config=configs/mlm_base.py --config.model.dtype=bfloat16).

On TPUs: compiled for a v4-16 by libtpu, 17.4 GiB per chip of 32 (pretrain compile
--topology=v4-16 --config=mlm_base; every zoo config: tools/zoo_compile.md).
"""

from pretrain.configs import _zoo

SIZED_FOR = _zoo.SizedFor("8 x A100 40GB", devices=8, device_gib=40, estimate_gib=32.4, tpu="v4-16", tpu_gib=17.4)


def get_config():
  return _zoo.apply(_zoo.c4(_zoo.base(), "mlm"), {
      "model.d_model": 768, "model.num_layers": 12, "model.num_heads": 12, "model.num_kv_heads": 12,
      "model.head_dim": 64, "model.mlp_dim": 2048, "model.tie_embeddings": True, "model.scan_layers": True,
      "data.seq_len": 512,
      "optimizer.learning_rate": 1e-4, "optimizer.warmup_steps": 10_000, "optimizer.weight_decay": 0.01,
      "train.steps": 1_000_000, "train.batch_size": 256, "mesh.data": -1,
  })
