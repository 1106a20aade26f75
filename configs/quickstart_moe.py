"""Quickstart with a mixture of experts: the quickstart's decoder-only causal LM on the bundled corpus, each
feed-forward layer 8 SwiGLU experts of width 384 of which every token takes 2 (Mixtral's routing, dropless).

A token passes through 2 x 384 = 768 feed-forward channels, the quickstart's dense width: the same active
parameters and FLOPs per token (plus the router's), 4x the feed-forward parameters. 300 steps on 2 CPU cores in
a few minutes; `pretrain bench --config=quickstart_moe --compare=dense` times its step against the dense one.
"""

from pretrain.configs import _zoo


def get_config():
  return _zoo.apply(_zoo.base(), {"model.moe_experts": 8, "model.moe_top_k": 2, "model.moe_mlp_dim": 384})
