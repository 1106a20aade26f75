"""Decoder-only models <-> transformers' LlamaForCausalLM, and with experts in every layer MixtralForCausalLM (same
architecture, same numbers). Mixtral's experts are written as its checkpoints hold them
(block_sparse_moe.experts.E.w1/w3/w2), which every transformers version loads."""

import numpy as np

from pretrain.console import log
from pretrain.errors import UserError
from pretrain.hf import layers

ARCHITECTURE = "LlamaForCausalLM"
MIXTRAL = "MixtralForCausalLM"
# The tokenizer prepends id 0, the BOS of training (inputs are the targets shifted right after it).
PREPENDS_BOS = True


def hf_config(model_cfg, vocab_size: int, max_length: int) -> dict:
  if model_cfg.get("moe_experts"):
    return _mixtral_config(model_cfg, vocab_size, max_length)
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


def _mixtral_config(model_cfg, vocab_size: int, max_length: int) -> dict:
  """Llama's config.json with Mixtral's experts, or a UserError naming the setting Mixtral lacks."""
  m = model_cfg
  lacking = {"model.moe_every > 1 (Mixtral has experts in every layer)": m.moe_every != 1,
             "model.moe_shared_mlp_dim (Mixtral has no shared expert)": m.moe_shared_mlp_dim,
             "model.moe_normalize_top_k=False (Mixtral renormalises the top-k weights)": not m.moe_normalize_top_k}
  if any(lacking.values()):
    raise UserError(f"this mixture-of-experts model has no {MIXTRAL} export: it uses "
                    f"{', '.join(k for k, bad in lacking.items() if bad)}")
  if m.moe_capacity_factor:
    log(f"model.moe_capacity_factor={m.moe_capacity_factor}: transformers' Mixtral computes every token's experts "
        "(dropless); its outputs equal this model's wherever no token is over capacity")
  dense = m.copy_and_resolve_references()
  dense.moe_experts, dense.mlp_dim = 0, m.moe_mlp_dim or m.mlp_dim
  config = hf_config(dense, vocab_size, max_length)
  del config["mlp_bias"], config["attention_bias"]
  return {**config, "architectures": [MIXTRAL], "model_type": "mixtral", "num_local_experts": m.moe_experts,
          "num_experts_per_tok": m.moe_top_k, "router_jitter_noise": float(m.moe_router_jitter),
          "sliding_window": None, "output_router_logits": False}


def model_config(hf: dict) -> dict:
  """Our model.* settings for a Llama or Mixtral config.json."""
  heads = hf["num_attention_heads"]
  rope = hf.get("rope_parameters") or {"rope_theta": hf.get("rope_theta", 10000.0), "rope_type": "default"}
  unsupported = {"rope_parameters.rope_type": rope.get("rope_type", "default") != "default",
                 "attention_bias": hf.get("attention_bias", False), "mlp_bias": hf.get("mlp_bias", False),
                 "hidden_act": hf.get("hidden_act", "silu") != "silu",
                 "sliding_window": hf["model_type"] == "mixtral" and hf.get("sliding_window")}
  experts = {}
  if hf["model_type"] == "mixtral":
    experts = {"moe_experts": hf["num_local_experts"], "moe_top_k": hf["num_experts_per_tok"], "moe_every": 1,
               "moe_mlp_dim": 0, "moe_shared_mlp_dim": 0, "moe_capacity_factor": 0.0, "moe_normalize_top_k": True,
               "moe_router_jitter": float(hf.get("router_jitter_noise") or 0.0)}
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
  for i, layer in enumerate(layers.unstack(params, "layers", "layer_{}", model_cfg.num_layers)):
    p, a = f"model.layers.{i}.", layer["attention"]
    state.update({
        p + "input_layernorm.weight": layer["attention_norm"]["scale"],
        p + "self_attn.q_proj.weight": _flat_in(a["query"]).T,
        p + "self_attn.k_proj.weight": _flat_in(a["key"]).T,
        p + "self_attn.v_proj.weight": _flat_in(a["value"]).T,
        p + "self_attn.o_proj.weight": _attention_out(a["out"]),
    })
    if "moe" in layer:
      state.update(_experts_to_hf(p + "block_sparse_moe.", layer["moe"]))
      state[p + "post_attention_layernorm.weight"] = layer["moe_norm"]["scale"]
      continue
    state.update({
        p + "post_attention_layernorm.weight": layer["mlp_norm"]["scale"],
        p + "mlp.gate_proj.weight": layer["mlp"]["wi_0"]["kernel"].T,
        p + "mlp.up_proj.weight": layer["mlp"]["wi_1"]["kernel"].T,
        p + "mlp.down_proj.weight": layer["mlp"]["wo"]["kernel"].T,
    })
  return state


def _experts_to_hf(prefix: str, moe: dict) -> dict:
  """Mixtral's router (gate, [E, D]) and experts (w1 the gate, w3 the up, w2 the down projection; [out, in])."""
  state = {prefix + "gate.weight": moe["router"].T}
  for e in range(moe["router"].shape[1]):
    state.update({f"{prefix}experts.{e}.w1.weight": moe["wi_0"][e].T, f"{prefix}experts.{e}.w3.weight": moe["wi_1"][e].T,
                  f"{prefix}experts.{e}.w2.weight": moe["wo"][e].T})
  return state


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
    if c.get("moe_experts"):
      expert = lambda name, i=i: np.stack([get(f"block_sparse_moe.experts.{e}.{name}").T
                                           for e in range(c.moe_experts)])
      layer.update(moe_norm={"scale": get("post_attention_layernorm")},
                   moe={"router": get("block_sparse_moe.gate").T, "wi_0": expert("w1"), "wi_1": expert("w3"),
                        "wo": expert("w2")})
    else:
      layer.update(mlp_norm={"scale": get("post_attention_layernorm")},
                   mlp={"wi_0": {"kernel": get("mlp.gate_proj").T}, "wi_1": {"kernel": get("mlp.up_proj").T},
                        "wo": {"kernel": get("mlp.down_proj").T}})
    per_layer.append(layer)
  params = {"embed": {"embedding": state["model.embed_tokens.weight"]},
            "final_norm": {"scale": state["model.norm.weight"]},
            **layers.stack(per_layer, "layers", "layer_{}", c.scan_layers)}
  if not c.tie_embeddings:
    params["lm_head"] = {"kernel": state["lm_head.weight"].T}
  return params
