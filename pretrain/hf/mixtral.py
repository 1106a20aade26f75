"""Decoder-only models with experts in every layer, top-k weights renormalised and no shared expert <->
transformers' MixtralForCausalLM: Llama's layout (llama.py) with Mixtral's experts (w1, w3, w2), written one
tensor per expert and projection, as its checkpoints hold them."""

from pretrain.hf import llama
from pretrain.system.console import log

ARCHITECTURE, MODEL_TYPE, FAMILY = "MixtralForCausalLM", "mixtral", "llama"
IMPORTS, PREPENDS_BOS = True, True
EXPERTS = llama.Experts("block_sparse_moe.", {"wi_0": "w1", "wi_1": "w3", "wo": "w2"})


def matches(model_cfg) -> bool:
  m = model_cfg
  return bool(m.get("moe_experts")) and m.moe_every == 1 and not m.moe_shared_mlp_dim and m.moe_normalize_top_k


def dropless_note(model_cfg) -> None:
  """transformers computes every token's experts: say so where ours has a capacity."""
  if model_cfg.moe_capacity_factor:
    log(f"model.moe_capacity_factor={model_cfg.moe_capacity_factor}: transformers computes every token's experts "
        "(dropless); its outputs equal this model's wherever no token is over capacity")


def hf_config(model_cfg, vocab_size: int, max_length: int) -> dict:
  m = model_cfg
  dropless_note(m)
  return {**llama.moe_config(m, vocab_size, max_length), "architectures": [ARCHITECTURE], "model_type": MODEL_TYPE,
          "intermediate_size": m.moe_mlp_dim or m.mlp_dim, "num_local_experts": m.moe_experts,
          "num_experts_per_tok": m.moe_top_k, "router_jitter_noise": float(m.moe_router_jitter),
          "sliding_window": None, "output_router_logits": False}


def model_config(hf: dict) -> tuple[dict, list[str]]:
  settings, unsupported = llama.model_config(hf)
  settings.update({"moe_experts": hf["num_local_experts"], "moe_top_k": hf["num_experts_per_tok"], "moe_every": 1,
                   "moe_mlp_dim": hf["intermediate_size"], "moe_shared_mlp_dim": 0, "moe_capacity_factor": 0.0,
                   "moe_normalize_top_k": True, "moe_router_jitter": float(hf.get("router_jitter_noise") or 0.0)})
  return settings, unsupported + (["sliding_window"] if hf.get("sliding_window") else [])


def to_hf(params, model_cfg) -> dict:
  return llama.to_hf(params, model_cfg, EXPERTS)


def from_hf(state: dict, model_cfg) -> dict:
  return llama.from_hf(state, model_cfg, EXPERTS)
