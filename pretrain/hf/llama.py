"""Decoder-only models <-> transformers' LlamaForCausalLM (same architecture, same numbers)."""

import numpy as np

from pretrain.hf import layers

ARCHITECTURE = "LlamaForCausalLM"
# The tokenizer prepends id 0, the BOS of training (inputs are the targets shifted right after it).
PREPENDS_BOS = True
RMS_NORM_EPS = 1e-6  # layers.RMSNorm's


def hf_config(model_cfg, vocab_size: int, max_length: int) -> dict:
  return {
      "architectures": [ARCHITECTURE], "model_type": "llama", "vocab_size": vocab_size,
      "hidden_size": model_cfg.d_model, "intermediate_size": model_cfg.mlp_dim,
      "num_hidden_layers": model_cfg.num_layers, "num_attention_heads": model_cfg.num_heads,
      "num_key_value_heads": model_cfg.num_kv_heads, "head_dim": model_cfg.head_dim, "hidden_act": "silu",
      "max_position_embeddings": max_length, "rms_norm_eps": RMS_NORM_EPS,
      "rope_parameters": {"rope_type": "default", "rope_theta": float(model_cfg.rope_theta)},
      "tie_word_embeddings": bool(model_cfg.tie_embeddings), "attention_bias": False, "mlp_bias": False,
      # Training inputs are the targets shifted right after id 0, so id 0 is the BOS.
      "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 0, "dtype": "float32",
  }


def model_config(hf: dict) -> dict:
  """Our model.* settings for a Llama config.json."""
  heads = hf["num_attention_heads"]
  rope = hf.get("rope_parameters") or {"rope_theta": hf.get("rope_theta", 10000.0), "rope_type": "default"}
  unsupported = {"rope_parameters.rope_type": rope.get("rope_type", "default") != "default",
                 "attention_bias": hf.get("attention_bias", False), "mlp_bias": hf.get("mlp_bias", False),
                 "hidden_act": hf.get("hidden_act", "silu") != "silu"}
  return {"d_model": hf["hidden_size"], "mlp_dim": hf["intermediate_size"], "num_layers": hf["num_hidden_layers"],
          "num_heads": heads, "num_kv_heads": hf.get("num_key_value_heads") or heads,
          "head_dim": hf.get("head_dim") or hf["hidden_size"] // heads, "rope_theta": float(rope["rope_theta"]),
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
        p + "post_attention_layernorm.weight": layer["mlp_norm"]["scale"],
        p + "self_attn.q_proj.weight": _flat_in(a["query"]).T,
        p + "self_attn.k_proj.weight": _flat_in(a["key"]).T,
        p + "self_attn.v_proj.weight": _flat_in(a["value"]).T,
        p + "self_attn.o_proj.weight": _attention_out(a["out"]),
        p + "mlp.gate_proj.weight": layer["mlp"]["wi_0"]["kernel"].T,
        p + "mlp.up_proj.weight": layer["mlp"]["wi_1"]["kernel"].T,
        p + "mlp.down_proj.weight": layer["mlp"]["wo"]["kernel"].T,
    })
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
    per_layer.append({
        "attention_norm": {"scale": get("input_layernorm")},
        "mlp_norm": {"scale": get("post_attention_layernorm")},
        "attention": {"query": get("self_attn.q_proj").T.reshape(d, n, h),
                      "key": get("self_attn.k_proj").T.reshape(d, k, h),
                      "value": get("self_attn.v_proj").T.reshape(d, k, h),
                      "out": get("self_attn.o_proj").T.reshape(n, h, d)},
        "mlp": {"wi_0": {"kernel": get("mlp.gate_proj").T}, "wi_1": {"kernel": get("mlp.up_proj").T},
                "wo": {"kernel": get("mlp.down_proj").T}},
    })
  params = {"embed": {"embedding": state["model.embed_tokens.weight"]},
            "final_norm": {"scale": state["model.norm.weight"]},
            **layers.stack(per_layer, "layers", "layer_{}", c.scan_layers)}
  if not c.tie_embeddings:
    params["lm_head"] = {"kernel": state["lm_head.weight"].T}
  return params
