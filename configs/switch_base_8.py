"""Switch Transformer base with 8 experts: T5 v1.1 base whose every other feed-forward layer (in the encoder and
the decoder) is 8 gated-GELU experts, each token routed to 1 (top-1, its raw router probability as its weight),
with capacity factor 1.25 (tokens over capacity pass through the residual) and the load-balancing loss at 0.01,
as the Switch paper; span corruption on C4 with T5's recipe. About 0.64B parameters, 0.25B active per token.

Sized for 8 x A100 40GB (or a v4-16): experts split over mesh.expert=4 (2 per device), batch 128 x (512 inputs,
114 targets) over the 8 devices in 2 microbatches: about 15.5 GiB per device (pretrain estimate-memory
--devices=8 --config=configs/switch_base_8.py --config.model.dtype=bfloat16). With
--config.model.feed_forward=relu (the Switch paper's ReLU layers and experts) it exports as transformers'
SwitchTransformersForConditionalGeneration.

On TPUs: compiled for a v4-16 by libtpu, 13.6 GiB per chip of 32 (pretrain compile
--topology=v4-16 --config=switch_base_8; every zoo config: tools/zoo_compile.md).
"""

from pretrain.configs import _zoo

SIZED_FOR = _zoo.SizedFor("8 x A100 40GB", devices=8, device_gib=40, estimate_gib=15.5, tpu="v4-16", tpu_gib=13.6)


def get_config():
  return _zoo.apply(_zoo.t5_1_1(768, 2048, 12, 12, "none", (-1, 1, 1), microbatches=2), {
      "model.moe_experts": 8, "model.moe_top_k": 1, "model.moe_every": 2, "model.moe_capacity_factor": 1.25,
      "model.moe_normalize_top_k": False, "loss.moe_load_balance": 0.01, "loss.moe_z_loss": 0.0,
      "mesh.expert": 4,
  })
