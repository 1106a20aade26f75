"""Decoder-only models with experts that Mixtral cannot hold (experts every n-th layer, a gated shared expert, raw
top-k weights) <-> transformers' Qwen2MoeForCausalLM: Llama's layout (llama.py) with Qwen2-MoE's experts and
shared expert (empty tensors where ours has none: transformers' Qwen2-MoE always has one)."""

from pretrain.hf import llama, mixtral

ARCHITECTURE, MODEL_TYPE, FAMILY = "Qwen2MoeForCausalLM", "qwen2_moe", "llama"
IMPORTS, PREPENDS_BOS = True, True
EXPERTS = llama.Experts("mlp.", {"wi_0": "gate_proj", "wi_1": "up_proj", "wo": "down_proj"}, shared=True)


def matches(model_cfg) -> bool:
  return bool(model_cfg.get("moe_experts")) and not mixtral.matches(model_cfg)


def hf_config(model_cfg, vocab_size: int, max_length: int) -> dict:
  m = model_cfg
  mixtral.dropless_note(m)
  return {**llama.moe_config(m, vocab_size, max_length), "architectures": [ARCHITECTURE], "model_type": MODEL_TYPE,
          "num_experts": m.moe_experts, "num_experts_per_tok": m.moe_top_k,
          "moe_intermediate_size": m.moe_mlp_dim or m.mlp_dim, "shared_expert_intermediate_size": m.moe_shared_mlp_dim,
          "decoder_sparse_step": m.moe_every, "mlp_only_layers": [], "norm_topk_prob": bool(m.moe_normalize_top_k),
          "qkv_bias": False, "use_sliding_window": False, "sliding_window": None, "output_router_logits": False}


def model_config(hf: dict) -> tuple[dict, list[str]]:
  settings, unsupported = llama.model_config(hf)
  settings.update({"moe_experts": hf["num_experts"], "moe_top_k": hf["num_experts_per_tok"],
                   "moe_every": hf.get("decoder_sparse_step", 1), "moe_mlp_dim": hf["moe_intermediate_size"],
                   "moe_shared_mlp_dim": hf.get("shared_expert_intermediate_size", 0), "moe_capacity_factor": 0.0,
                   "moe_normalize_top_k": bool(hf.get("norm_topk_prob", False)), "moe_router_jitter": 0.0})
  other = {"use_sliding_window": hf.get("use_sliding_window", False), "qkv_bias": hf.get("qkv_bias", True),
           "mlp_only_layers": hf.get("mlp_only_layers")}
  return settings, unsupported + [k for k, bad in other.items() if bad]


def to_hf(params, model_cfg) -> dict:
  return llama.to_hf(params, model_cfg, EXPERTS)


def from_hf(state: dict, model_cfg) -> dict:
  return llama.from_hf(state, model_cfg, EXPERTS)
