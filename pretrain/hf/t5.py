"""Encoder-decoder models <-> transformers' T5ForConditionalGeneration (T5 v1.1: gated-GELU, untied head)."""

import numpy as np

from pretrain.errors import UserError
from pretrain.hf import layers

ARCHITECTURE = "T5ForConditionalGeneration"
# The tokenizer appends EOS to the inputs, as seqio's tasks do.
PREPENDS_BOS = False


def hf_config(model_cfg, vocab_size: int, max_length: int) -> dict:
  del max_length  # Relative positions: T5 has no maximum length.
  if model_cfg.get("moe_experts"):
    raise UserError("an encoder-decoder model with experts (model.moe_experts) has no transformers export here: "
                    "SwitchTransformers' layers are T5 v1.0's ReLU feed-forward layers, not v1.1's gated GELU")
  return {
      "architectures": [ARCHITECTURE], "model_type": "t5", "vocab_size": vocab_size,
      "d_model": model_cfg.d_model, "d_kv": model_cfg.head_dim, "d_ff": model_cfg.mlp_dim,
      "num_layers": model_cfg.num_layers, "num_decoder_layers": model_cfg.num_decoder_layers or model_cfg.num_layers,
      "num_heads": model_cfg.num_heads, "relative_attention_num_buckets": model_cfg.relative_attention_num_buckets,
      "relative_attention_max_distance": model_cfg.relative_attention_max_distance,
      "feed_forward_proj": "gated-gelu", "layer_norm_epsilon": 1e-6, "dropout_rate": float(model_cfg.dropout),
      "tie_word_embeddings": False, "is_encoder_decoder": True,
      "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0, "dtype": "float32",
  }


def model_config(hf: dict) -> dict:
  """Our model.* settings for a T5 config.json, and the features we cannot reproduce."""
  unsupported = {"feed_forward_proj (only gated-gelu, T5 v1.1)": hf.get("feed_forward_proj") != "gated-gelu",
                 "tie_word_embeddings (T5 v1.0 scales tied outputs)": hf.get("tie_word_embeddings", True)}
  return {"d_model": hf["d_model"], "head_dim": hf["d_kv"], "mlp_dim": hf["d_ff"], "num_layers": hf["num_layers"],
          "num_decoder_layers": hf.get("num_decoder_layers") or hf["num_layers"], "num_heads": hf["num_heads"],
          "relative_attention_num_buckets": hf.get("relative_attention_num_buckets", 32),
          "relative_attention_max_distance": hf.get("relative_attention_max_distance", 128),
          "vocab_size": hf["vocab_size"]}, [k for k, bad in unsupported.items() if bad]


_ATTENTION = {"query": "q", "key": "k", "value": "v"}


def _attention_to_hf(prefix: str, p: dict) -> dict:
  state = {f"{prefix}.{hf}.weight": p[ours].reshape(p[ours].shape[0], -1).T for ours, hf in _ATTENTION.items()}
  n, h, d = p["out"].shape
  state[f"{prefix}.o.weight"] = p["out"].reshape(n * h, d).T
  return state


def _attention_from_hf(prefix: str, state: dict, n: int, h: int) -> dict:
  p = {ours: state[f"{prefix}.{hf}.weight"].T.reshape(-1, n, h) for ours, hf in _ATTENTION.items()}
  p["out"] = state[f"{prefix}.o.weight"].T.reshape(n, h, -1)
  return p


def _mlp_names(prefix: str):
  return {"wi_0": f"{prefix}.wi_0.weight", "wi_1": f"{prefix}.wi_1.weight", "wo": f"{prefix}.wo.weight"}


# (our sub-module, transformers' sub-layer index and name) of each block, by stack.
_BLOCKS = {
    "encoder": [("attention", 0, "SelfAttention")],
    "decoder": [("self_attention", 0, "SelfAttention"), ("cross_attention", 1, "EncDecAttention")],
}


def to_hf(params, model_cfg) -> dict[str, np.ndarray]:
  state = {"shared.weight": params["embed"]["embedding"], "lm_head.weight": params["lm_head"]["kernel"].T}
  counts = {"encoder": model_cfg.num_layers, "decoder": model_cfg.num_decoder_layers or model_cfg.num_layers}
  for stack, blocks in _BLOCKS.items():
    ours_stack = params[stack]
    state[f"{stack}.final_layer_norm.weight"] = ours_stack["norm"]["scale"]
    state[f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = (
        ours_stack["relative_bias"]["rel_embedding"])
    for i, layer in enumerate(layers.unstack(ours_stack, "layers", "layer_{}", counts[stack])):
      for ours, index, name in blocks:
        state.update(_attention_to_hf(f"{stack}.block.{i}.layer.{index}.{name}", layer[ours]))
        state[f"{stack}.block.{i}.layer.{index}.layer_norm.weight"] = layer[f"{ours}_norm"]["scale"]
      mlp = len(blocks)
      for ours, hf in _mlp_names(f"{stack}.block.{i}.layer.{mlp}.DenseReluDense").items():
        state[hf] = layer["mlp"][ours]["kernel"].T
      state[f"{stack}.block.{i}.layer.{mlp}.layer_norm.weight"] = layer["mlp_norm"]["scale"]
  return state


def from_hf(state: dict, model_cfg) -> dict:
  c = model_cfg
  params = {"embed": {"embedding": state["shared.weight"]}, "lm_head": {"kernel": state["lm_head.weight"].T}}
  counts = {"encoder": c.num_layers, "decoder": c.num_decoder_layers or c.num_layers}
  for stack, blocks in _BLOCKS.items():
    per_layer = []
    for i in range(counts[stack]):
      layer = {}
      for ours, index, name in blocks:
        layer[ours] = _attention_from_hf(f"{stack}.block.{i}.layer.{index}.{name}", state, c.num_heads, c.head_dim)
        layer[f"{ours}_norm"] = {"scale": state[f"{stack}.block.{i}.layer.{index}.layer_norm.weight"]}
      mlp = len(blocks)
      layer["mlp"] = {ours: {"kernel": state[hf].T}
                      for ours, hf in _mlp_names(f"{stack}.block.{i}.layer.{mlp}.DenseReluDense").items()}
      layer["mlp_norm"] = {"scale": state[f"{stack}.block.{i}.layer.{mlp}.layer_norm.weight"]}
      per_layer.append(layer)
    params[stack] = {
        "norm": {"scale": state[f"{stack}.final_layer_norm.weight"]},
        "relative_bias": {"rel_embedding": state[f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]},
        **layers.stack(per_layer, "layers", "layer_{}", c.scan_layers)}
  return params
