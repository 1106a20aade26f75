"""Decoder-only models <-> transformers' LlamaForCausalLM, and the decoder-only weight layout that Mixtral and
Qwen2-MoE share (mixtral.py, qwen2_moe.py: their experts through `Experts`). Same architecture, same numbers."""

import dataclasses

import numpy as np

from pretrain.hf import layers
from pretrain.system.errors import UserError

ARCHITECTURE, MODEL_TYPE, FAMILY = "LlamaForCausalLM", "llama", "llama"
IMPORTS = True
# The tokenizer prepends id 0, the BOS of training (inputs are the targets shifted right after it).
PREPENDS_BOS = True


def matches(model_cfg) -> bool:
  """Whether a decoder-only model exports as this architecture: a dense one."""
  return not model_cfg.get("moe_experts")


def hf_config(model_cfg, vocab_size: int, max_length: int) -> dict:
  if model_cfg.d_model % model_cfg.num_heads:  # transformers' LlamaConfig refuses it as it loads.
    raise UserError(f"transformers' {ARCHITECTURE} needs model.d_model ({model_cfg.d_model}) divisible by "
                    f"model.num_heads ({model_cfg.num_heads}), whatever model.head_dim; this model cannot be "
                    "exported as one")
  return _config(model_cfg, vocab_size, max_length)


def _config(model_cfg, vocab_size: int, max_length: int) -> dict:
  """Llama's config.json, which the architectures with experts share."""
  return {
      "architectures": [ARCHITECTURE], "model_type": MODEL_TYPE, "vocab_size": vocab_size,
      "hidden_size": model_cfg.d_model, "intermediate_size": model_cfg.mlp_dim,
      "num_hidden_layers": model_cfg.num_layers, "num_attention_heads": model_cfg.num_heads,
      "num_key_value_heads": model_cfg.num_kv_heads, "head_dim": model_cfg.head_dim, "hidden_act": "silu",
      "max_position_embeddings": max_length, "rms_norm_eps": float(model_cfg.get("norm_eps", 1e-6)),
      "rope_parameters": {"rope_type": "default", "rope_theta": float(model_cfg.rope_theta)},
      "rope_theta": float(model_cfg.rope_theta),  # What transformers 4 reads (5 reads rope_parameters).
      "tie_word_embeddings": bool(model_cfg.tie_embeddings), "attention_bias": False, "mlp_bias": False,
      # Training inputs are the targets shifted right after id 0, so id 0 is the BOS, and no pad: transformers
      # would take id 0 for padding where no attention mask is given, and freeze its embedding (padding_idx).
      "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": None, "dtype": "float32",
  }


def moe_config(model_cfg, vocab_size: int, max_length: int) -> dict:
  """Llama's config.json, to which an architecture with experts adds its own fields."""
  dense = model_cfg.copy_and_resolve_references()
  dense.moe_experts = 0
  config = _config(dense, vocab_size, max_length)
  del config["mlp_bias"], config["attention_bias"]
  return config


def model_config(hf: dict) -> tuple[dict, list[str]]:
  """(our model.* settings, the features of the config.json we cannot reproduce) of a Llama-layout config."""
  heads = hf["num_attention_heads"]
  # transformers 5 writes rope_parameters; a config.json saved by transformers 4 has rope_theta and rope_scaling
  # (null, or a scaling such as Llama 3's: {'rope_type': 'llama3', ...}, older ones {'type': 'linear', ...}).
  scaling = "rope_parameters" if hf.get("rope_parameters") else "rope_scaling"
  rope = hf.get("rope_parameters") or {**(hf.get("rope_scaling") or {}), "rope_theta": hf.get("rope_theta", 10000.0)}
  unsupported = {f"{scaling}.rope_type": rope.get("rope_type", rope.get("type", "default")) != "default",
                 "attention_bias": hf.get("attention_bias", False), "mlp_bias": hf.get("mlp_bias", False),
                 "hidden_act": hf.get("hidden_act", "silu") != "silu"}
  return {"d_model": hf["hidden_size"], "mlp_dim": hf["intermediate_size"], "num_layers": hf["num_hidden_layers"],
          "num_heads": heads, "num_kv_heads": hf.get("num_key_value_heads") or heads,
          "head_dim": hf.get("head_dim") or hf["hidden_size"] // heads, "rope_theta": float(rope["rope_theta"]),
          "norm_eps": float(hf.get("rms_norm_eps", 1e-6)), "tie_embeddings": bool(hf.get("tie_word_embeddings", False)),
          "vocab_size": hf["vocab_size"], "moe_experts": 0}, [k for k, bad in unsupported.items() if bad]


@dataclasses.dataclass(frozen=True)
class Experts:
  """How an architecture's checkpoint names a layer's experts: the module (`block`), each projection (ours ->
  its name), and whether it has a gated shared expert (Qwen2-MoE always does: empty where ours has none)."""
  block: str
  names: dict
  shared: bool = False

  def to_hf(self, prefix: str, moe: dict) -> dict:
    """The router (gate, [E, D]), each expert's projections ([out, in]) and a shared expert and its gate."""
    prefix += self.block
    state = {prefix + "gate.weight": moe["router"].T}
    for e in range(moe["router"].shape[1]):
      state.update({f"{prefix}experts.{e}.{hf_name}.weight": moe[ours][e].T for ours, hf_name in self.names.items()})
    if self.shared:
      d = moe["router"].shape[0]
      shared = moe.get("shared") or {name: {"kernel": np.zeros((d, 0) if name != "wo" else (0, d), np.float32)}
                                     for name in ("wi_0", "wi_1", "wo")}
      gate = moe["shared_gate"]["kernel"] if "shared_gate" in moe else np.zeros((d, 1), np.float32)
      state.update({f"{prefix}shared_expert.{hf_name}.weight": shared[ours]["kernel"].T
                    for ours, hf_name in self.names.items()})
      state[prefix + "shared_expert_gate.weight"] = gate.T
    return state

  def from_hf(self, get, model_cfg) -> dict:
    """Our MoE parameters of one layer from its tensors (`get(name)`: the layer's tensor of that name)."""
    moe = {"router": get(self.block + "gate").T}
    moe.update({ours: np.stack([get(f"{self.block}experts.{e}.{hf_name}").T for e in range(model_cfg.moe_experts)])
                for ours, hf_name in self.names.items()})
    if model_cfg.moe_shared_mlp_dim:
      moe["shared"] = {ours: {"kernel": get(f"{self.block}shared_expert.{hf_name}").T}
                       for ours, hf_name in self.names.items()}
      moe["shared_gate"] = {"kernel": get(self.block + "shared_expert_gate").T}
    return moe


def _attention_out(kernel_NHD):
  n, h, d = kernel_NHD.shape
  return kernel_NHD.reshape(n * h, d).T


def _flat_in(kernel_DNH):
  d, n, h = kernel_DNH.shape
  return kernel_DNH.reshape(d, n * h)


def _unit(model_cfg) -> int:
  """Layers per unit of a scan with experts every n-th layer (hf.layers.unstack)."""
  return model_cfg.moe_every if model_cfg.get("moe_experts") else 1


def to_hf(params, model_cfg, experts: Experts | None = None) -> dict[str, np.ndarray]:
  """transformers' state dict (Linear weights are [out, in]) from our parameters; `experts`: how the layers with
  experts are named (an architecture with experts)."""
  state = {"model.embed_tokens.weight": params["embed"]["embedding"],
           "model.norm.weight": params["final_norm"]["scale"]}
  if not model_cfg.tie_embeddings:
    state["lm_head.weight"] = params["lm_head"]["kernel"].T
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
      state.update(experts.to_hf(p, layer["moe"]))
      state[p + "post_attention_layernorm.weight"] = layer["moe_norm"]["scale"]
      continue
    state.update({
        p + "post_attention_layernorm.weight": layer["mlp_norm"]["scale"],
        p + "mlp.gate_proj.weight": layer["mlp"]["wi_0"]["kernel"].T,
        p + "mlp.up_proj.weight": layer["mlp"]["wi_1"]["kernel"].T,
        p + "mlp.down_proj.weight": layer["mlp"]["wo"]["kernel"].T,
    })
  return state


def from_hf(state: dict, model_cfg, experts: Experts | None = None) -> dict:
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
      layer.update(moe_norm={"scale": get("post_attention_layernorm")}, moe=experts.from_hf(get, c))
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
