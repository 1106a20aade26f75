"""Decoder-only models <-> transformers' LlamaForCausalLM; with experts, MixtralForCausalLM (experts in every layer,
top-k weights renormalised, no shared expert) or else Qwen2MoeForCausalLM (experts every n-th layer, a gated shared
expert, raw or renormalised weights). Same architecture, same numbers. The experts are written as those models'
checkpoints hold them (one tensor per expert and projection), which every transformers version loads."""

import numpy as np

from pretrain.system.console import log
from pretrain.system.errors import UserError
from pretrain.hf import layers

ARCHITECTURE = "LlamaForCausalLM"
MIXTRAL, QWEN2_MOE = "MixtralForCausalLM", "Qwen2MoeForCausalLM"
# The tokenizer prepends id 0, the BOS of training (inputs are the targets shifted right after it).
PREPENDS_BOS = True


def moe_architecture(model_cfg) -> str | None:
  """The transformers class a model with experts exports as (None: a dense model, Llama)."""
  m = model_cfg
  if not m.get("moe_experts"):
    return None
  return MIXTRAL if m.moe_every == 1 and not m.moe_shared_mlp_dim and m.moe_normalize_top_k else QWEN2_MOE


def hf_config(model_cfg, vocab_size: int, max_length: int) -> dict:
  if moe_architecture(model_cfg):
    return _moe_config(model_cfg, vocab_size, max_length)
  return {
      "architectures": [ARCHITECTURE], "model_type": "llama", "vocab_size": vocab_size,
      "hidden_size": model_cfg.d_model, "intermediate_size": model_cfg.mlp_dim,
      "num_hidden_layers": model_cfg.num_layers, "num_attention_heads": model_cfg.num_heads,
      "num_key_value_heads": model_cfg.num_kv_heads, "head_dim": model_cfg.head_dim, "hidden_act": "silu",
      "max_position_embeddings": max_length, "rms_norm_eps": float(model_cfg.get("norm_eps", 1e-6)),
      "rope_parameters": {"rope_type": "default", "rope_theta": float(model_cfg.rope_theta)},
      "tie_word_embeddings": bool(model_cfg.tie_embeddings), "attention_bias": False, "mlp_bias": False,
      # Training inputs are the targets shifted right after id 0, so id 0 is the BOS.
      "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 0, "dtype": "float32",
  }


def _moe_config(model_cfg, vocab_size: int, max_length: int) -> dict:
  """Llama's config.json with Mixtral's or Qwen2-MoE's experts."""
  m = model_cfg
  if m.moe_capacity_factor:
    log(f"model.moe_capacity_factor={m.moe_capacity_factor}: transformers computes every token's experts "
        "(dropless); its outputs equal this model's wherever no token is over capacity")
  dense = m.copy_and_resolve_references()
  dense.moe_experts = 0
  config = hf_config(dense, vocab_size, max_length)
  del config["mlp_bias"], config["attention_bias"]
  width = m.moe_mlp_dim or m.mlp_dim
  if moe_architecture(m) == MIXTRAL:
    return {**config, "architectures": [MIXTRAL], "model_type": "mixtral", "intermediate_size": width,
            "num_local_experts": m.moe_experts, "num_experts_per_tok": m.moe_top_k,
            "router_jitter_noise": float(m.moe_router_jitter), "sliding_window": None, "output_router_logits": False}
  return {**config, "architectures": [QWEN2_MOE], "model_type": "qwen2_moe", "num_experts": m.moe_experts,
          "num_experts_per_tok": m.moe_top_k, "moe_intermediate_size": width,
          "shared_expert_intermediate_size": m.moe_shared_mlp_dim, "decoder_sparse_step": m.moe_every,
          "mlp_only_layers": [], "norm_topk_prob": bool(m.moe_normalize_top_k), "qkv_bias": False,
          "use_sliding_window": False, "sliding_window": None, "output_router_logits": False}


def model_config(hf: dict) -> dict:
  """Our model.* settings for a Llama, Mixtral or Qwen2-MoE config.json."""
  heads = hf["num_attention_heads"]
  rope = hf.get("rope_parameters") or {"rope_theta": hf.get("rope_theta", 10000.0), "rope_type": "default"}
  unsupported = {"rope_parameters.rope_type": rope.get("rope_type", "default") != "default",
                 "attention_bias": hf.get("attention_bias", False), "mlp_bias": hf.get("mlp_bias", False),
                 "hidden_act": hf.get("hidden_act", "silu") != "silu",
                 "sliding_window": hf["model_type"] == "mixtral" and hf.get("sliding_window"),
                 "use_sliding_window": hf.get("use_sliding_window", False),
                 "qkv_bias": hf["model_type"] == "qwen2_moe" and hf.get("qkv_bias", True),
                 "mlp_only_layers": hf.get("mlp_only_layers")}
  experts = {}
  if hf["model_type"] == "mixtral":
    experts = {"moe_experts": hf["num_local_experts"], "moe_top_k": hf["num_experts_per_tok"], "moe_every": 1,
               "moe_mlp_dim": hf["intermediate_size"], "moe_shared_mlp_dim": 0, "moe_capacity_factor": 0.0,
               "moe_normalize_top_k": True, "moe_router_jitter": float(hf.get("router_jitter_noise") or 0.0)}
  elif hf["model_type"] == "qwen2_moe":
    experts = {"moe_experts": hf["num_experts"], "moe_top_k": hf["num_experts_per_tok"],
               "moe_every": hf.get("decoder_sparse_step", 1), "moe_mlp_dim": hf["moe_intermediate_size"],
               "moe_shared_mlp_dim": hf.get("shared_expert_intermediate_size", 0), "moe_capacity_factor": 0.0,
               "moe_normalize_top_k": bool(hf.get("norm_topk_prob", False)), "moe_router_jitter": 0.0}
  return {**experts, "d_model": hf["hidden_size"], "mlp_dim": hf["intermediate_size"],
          "num_layers": hf["num_hidden_layers"],
          "num_heads": heads, "num_kv_heads": hf.get("num_key_value_heads") or heads,
          "head_dim": hf.get("head_dim") or hf["hidden_size"] // heads, "rope_theta": float(rope["rope_theta"]),
          "norm_eps": float(hf.get("rms_norm_eps", 1e-6)),
          "tie_embeddings": bool(hf.get("tie_word_embeddings", False)), "vocab_size": hf["vocab_size"]}, [
              k for k, bad in unsupported.items() if bad]


def _attention_out(kernel_NHD):
  n, h, d = kernel_NHD.shape
  return kernel_NHD.reshape(n * h, d).T


def to_hf(params, model_cfg) -> dict[str, np.ndarray]:
  """transformers' state dict (Linear weights are [out, in]) from our parameters."""
  state = {"model.embed_tokens.weight": params["embed"]["embedding"],
           "model.norm.weight": params["final_norm"]["scale"]}
  if not model_cfg.tie_embeddings:
    state["lm_head.weight"] = params["lm_head"]["kernel"].T
  architecture = moe_architecture(model_cfg)
  for i, layer in enumerate(layers.unstack(params, "layers", "layer_{}", model_cfg.num_layers, _unit(model_cfg))):
    p, a = f"model.layers.{i}.", layer["attention"]
    state.update({
        p + "input_layernorm.weight": layer["attention_norm"]["scale"],
        p + "self_attn.q_proj.weight": _flat_in(a["query"]).T,
        p + "self_attn.k_proj.weight": _flat_in(a["key"]).T,
        p + "self_attn.v_proj.weight": _flat_in(a["value"]).T,
        p + "self_attn.o_proj.weight": _attention_out(a["out"]),
    })
    if "moe" in layer:
      state.update(_experts_to_hf(p, layer["moe"], architecture, model_cfg))
      state[p + "post_attention_layernorm.weight"] = layer["moe_norm"]["scale"]
      continue
    state.update({
        p + "post_attention_layernorm.weight": layer["mlp_norm"]["scale"],
        p + "mlp.gate_proj.weight": layer["mlp"]["wi_0"]["kernel"].T,
        p + "mlp.up_proj.weight": layer["mlp"]["wi_1"]["kernel"].T,
        p + "mlp.down_proj.weight": layer["mlp"]["wo"]["kernel"].T,
    })
  return state


def _unit(model_cfg) -> int:
  """Layers per unit of a scan with experts every n-th layer (hf.layers.unstack)."""
  return model_cfg.moe_every if model_cfg.get("moe_experts") else 1


# Our expert kernels -> the names of each architecture's projections.
_EXPERT_NAMES = {MIXTRAL: ("block_sparse_moe.", {"wi_0": "w1", "wi_1": "w3", "wo": "w2"}),
                 QWEN2_MOE: ("mlp.", {"wi_0": "gate_proj", "wi_1": "up_proj", "wo": "down_proj"})}


def _experts_to_hf(prefix: str, moe: dict, architecture: str, model_cfg) -> dict:
  """The router (gate, [E, D]), each expert's projections ([out, in]) and Qwen2-MoE's shared expert and its gate
  (empty tensors for a model without one: transformers' Qwen2-MoE always has it)."""
  block, names = _EXPERT_NAMES[architecture]
  prefix += block
  state = {prefix + "gate.weight": moe["router"].T}
  for e in range(moe["router"].shape[1]):
    state.update({f"{prefix}experts.{e}.{hf_name}.weight": moe[ours][e].T for ours, hf_name in names.items()})
  if architecture == QWEN2_MOE:
    d = moe["router"].shape[0]
    shared = moe.get("shared") or {name: {"kernel": np.zeros((d, 0) if name != "wo" else (0, d), np.float32)}
                                   for name in ("wi_0", "wi_1", "wo")}
    gate = moe["shared_gate"]["kernel"] if "shared_gate" in moe else np.zeros((d, 1), np.float32)
    state.update({f"{prefix}shared_expert.{hf_name}.weight": shared[ours]["kernel"].T
                  for ours, hf_name in names.items()})
    state[prefix + "shared_expert_gate.weight"] = gate.T
  return state


def _experts_from_hf(get, model_cfg) -> dict:
  """Our MoE parameters of one layer from its tensors (`get(name)`: the layer's tensor of that name)."""
  block, names = _EXPERT_NAMES[moe_architecture(model_cfg)]
  moe = {"router": get(block + "gate").T}
  moe.update({ours: np.stack([get(f"{block}experts.{e}.{hf_name}").T for e in range(model_cfg.moe_experts)])
              for ours, hf_name in names.items()})
  if model_cfg.moe_shared_mlp_dim:
    moe["shared"] = {ours: {"kernel": get(f"{block}shared_expert.{hf_name}").T} for ours, hf_name in names.items()}
    moe["shared_gate"] = {"kernel": get(block + "shared_expert_gate").T}
  return moe


def _flat_in(kernel_DNH):
  d, n, h = kernel_DNH.shape
  return kernel_DNH.reshape(d, n * h)


def from_hf(state: dict, model_cfg) -> dict:
  """Our parameters (unrolled or scanned, as model_cfg says) from transformers' state dict."""
  c = model_cfg
  d, n, k, h = c.d_model, c.num_heads, c.num_kv_heads, c.head_dim
  per_layer = []
  for i in range(c.num_layers):
    get = lambda name, i=i: state[f"model.layers.{i}.{name}.weight"]
    layer = {
        "attention_norm": {"scale": get("input_layernorm")},
        "attention": {"query": get("self_attn.q_proj").T.reshape(d, n, h),
                      "key": get("self_attn.k_proj").T.reshape(d, k, h),
                      "value": get("self_attn.v_proj").T.reshape(d, k, h),
                      "out": get("self_attn.o_proj").T.reshape(n, h, d)},
    }
    if c.get("moe_experts") and (i + 1) % c.moe_every == 0:
      layer.update(moe_norm={"scale": get("post_attention_layernorm")}, moe=_experts_from_hf(get, c))
    else:
      layer.update(mlp_norm={"scale": get("post_attention_layernorm")},
                   mlp={"wi_0": {"kernel": get("mlp.gate_proj").T}, "wi_1": {"kernel": get("mlp.up_proj").T},
                        "wo": {"kernel": get("mlp.down_proj").T}})
    per_layer.append(layer)
  params = {"embed": {"embedding": state["model.embed_tokens.weight"]},
            "final_norm": {"scale": state["model.norm.weight"]},
            **layers.stack(per_layer, "layers", "layer_{}", c.scan_layers, _unit(c))}
  if not c.tie_embeddings:
    params["lm_head"] = {"kernel": state["lm_head.weight"].T}
  return params
