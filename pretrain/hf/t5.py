"""Encoder-decoder models <-> transformers' T5ForConditionalGeneration (T5 v1.1: gated GELU, untied head; with
model.feed_forward=relu, v1.0's ReLU layers), and the encoder-decoder weight layout that the Switch Transformer
shares (switch_transformers.py: its experts where to_hf and from_hf are told `experts`)."""

import numpy as np

from pretrain.hf import layers
from pretrain.system.errors import UserError

ARCHITECTURE, MODEL_TYPE, FAMILY = "T5ForConditionalGeneration", "t5", "t5"
IMPORTS = True
# The tokenizer appends EOS to the inputs, as seqio's tasks do.
PREPENDS_BOS = False


def relu(model_cfg) -> bool:
  return model_cfg.get("feed_forward", "gated") == "relu"


def matches(model_cfg) -> bool:
  """Whether an encoder-decoder exports as this architecture: a dense one."""
  return not model_cfg.get("moe_experts")


def base_config(model_cfg, vocab_size: int) -> dict:
  """The fields of config.json that T5 and the Switch Transformer share."""
  m = model_cfg
  return {
      "vocab_size": vocab_size, "d_model": m.d_model, "d_kv": m.head_dim, "d_ff": m.mlp_dim,
      "num_layers": m.num_layers, "num_decoder_layers": m.num_decoder_layers or m.num_layers,
      "num_heads": m.num_heads, "relative_attention_num_buckets": m.relative_attention_num_buckets,
      "relative_attention_max_distance": m.relative_attention_max_distance,
      "layer_norm_epsilon": 1e-6, "dropout_rate": float(m.dropout), "tie_word_embeddings": False,
      "is_encoder_decoder": True, "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0,
      "dtype": "float32",
      # transformers' T5 cache is sized by the encoder's depth and fails a deeper or shallower decoder: generate
      # without it (generation_config.json takes this too).
      **({"use_cache": False} if (m.num_decoder_layers or m.num_layers) != m.num_layers else {}),
  }


def hf_config(model_cfg, vocab_size: int, max_length: int) -> dict:
  del max_length  # Relative positions: T5 has no maximum length.
  return {**base_config(model_cfg, vocab_size), "architectures": [ARCHITECTURE], "model_type": MODEL_TYPE,
          "feed_forward_proj": "relu" if relu(model_cfg) else "gated-gelu"}


def model_config(hf: dict) -> tuple[dict, list[str]]:
  """(our model.* settings, the features we cannot reproduce) of a T5 config.json."""
  activation = hf.get("feed_forward_proj")
  unsupported = {f"feed_forward_proj={activation!r} (gated-gelu or relu)": activation not in ("gated-gelu", "relu")}
  settings, shared = base_settings(hf, activation)
  return settings, [k for k, bad in {**unsupported, **shared}.items() if bad]


def base_settings(hf: dict, activation: str) -> tuple[dict, dict]:
  """(the settings T5 and the Switch Transformer share, {feature we cannot reproduce: whether this config has
  it})."""
  settings = {"d_model": hf["d_model"], "head_dim": hf["d_kv"], "mlp_dim": hf["d_ff"], "num_layers": hf["num_layers"],
              "num_decoder_layers": hf.get("num_decoder_layers") or hf["num_layers"], "num_heads": hf["num_heads"],
              "relative_attention_num_buckets": hf.get("relative_attention_num_buckets", 32),
              "relative_attention_max_distance": hf.get("relative_attention_max_distance", 128),
              "vocab_size": hf["vocab_size"], "feed_forward": "relu" if activation == "relu" else "gated",
              "moe_experts": 0}
  unsupported = {"tie_word_embeddings (T5 v1.0's and Switch's checkpoints scale tied outputs)":
                 hf.get("tie_word_embeddings", True)}
  return settings, unsupported


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


def _mlp_names(prefix: str, relu: bool):
  names = ("wi", "wo") if relu else ("wi_0", "wi_1", "wo")
  return {ours: f"{prefix}.{ours}.weight" for ours in names}


def _feed_forward_prefix(stack: str, i: int, mlp: int, model_cfg) -> str:
  """transformers' name of layer i's feed-forward module: T5's DenseReluDense, Switch's mlp."""
  return f"{stack}.block.{i}.layer.{mlp}.{'mlp' if model_cfg.get('moe_experts') else 'DenseReluDense'}"


def _unit(model_cfg) -> int:
  """Layers per unit of a scan with experts every n-th layer (hf.layers.unstack)."""
  return model_cfg.moe_every if model_cfg.get("moe_experts") else 1


# (our sub-module, transformers' sub-layer index and name) of each block, by stack.
_BLOCKS = {
    "encoder": [("attention", 0, "SelfAttention")],
    "decoder": [("self_attention", 0, "SelfAttention"), ("cross_attention", 1, "EncDecAttention")],
}


def to_hf(params, model_cfg) -> dict[str, np.ndarray]:
  state = {"shared.weight": params["embed"]["embedding"], "lm_head.weight": params["lm_head"]["kernel"].T}
  if model_cfg.get("moe_experts"):  # Switch with untied embeddings reads each stack's own (T5 ties them to shared).
    state.update({f"{stack}.embed_tokens.weight": params["embed"]["embedding"] for stack in _BLOCKS})
  counts = {"encoder": model_cfg.num_layers, "decoder": model_cfg.num_decoder_layers or model_cfg.num_layers}
  plain = relu(model_cfg)
  for stack, blocks in _BLOCKS.items():
    ours_stack = params[stack]
    state[f"{stack}.final_layer_norm.weight"] = ours_stack["norm"]["scale"]
    state[f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = (
        ours_stack["relative_bias"]["rel_embedding"])
    for i, layer in enumerate(layers.unstack(ours_stack, "layers", "layer_{}", counts[stack], _unit(model_cfg))):
      for ours, index, name in blocks:
        state.update(_attention_to_hf(f"{stack}.block.{i}.layer.{index}.{name}", layer[ours]))
        state[f"{stack}.block.{i}.layer.{index}.layer_norm.weight"] = layer[f"{ours}_norm"]["scale"]
      mlp = len(blocks)
      prefix = _feed_forward_prefix(stack, i, mlp, model_cfg)
      if "moe" in layer:
        moe = layer["moe"]
        state[f"{prefix}.router.classifier.weight"] = moe["router"].T
        for e in range(moe["router"].shape[1]):
          state.update({hf: moe[ours][e].T for ours, hf in _mlp_names(f"{prefix}.experts.expert_{e}", plain).items()})
      else:
        state.update({hf: layer["mlp"][ours]["kernel"].T for ours, hf in _mlp_names(prefix, plain).items()})
      state[f"{stack}.block.{i}.layer.{mlp}.layer_norm.weight"] = layer["moe_norm" if "moe" in layer else
                                                                        "mlp_norm"]["scale"]
  return state


def from_hf(state: dict, model_cfg) -> dict:
  """Our parameters of a T5 or Switch state dict."""
  c = model_cfg
  for stack in _BLOCKS:  # Ours is one embedding table; an untied Switch may hold three.
    own = state.get(f"{stack}.embed_tokens.weight")
    if own is not None and not np.array_equal(own, state["shared.weight"]):
      raise UserError(f"the checkpoint's {stack}.embed_tokens differs from its shared embedding; this project's "
                      "encoder-decoder reads one embedding table in both stacks")
  params = {"embed": {"embedding": state["shared.weight"]}, "lm_head": {"kernel": state["lm_head.weight"].T}}
  counts = {"encoder": c.num_layers, "decoder": c.num_decoder_layers or c.num_layers}
  plain, every = relu(c), (c.moe_every if c.get("moe_experts") else 0)
  for stack, blocks in _BLOCKS.items():
    per_layer = []
    for i in range(counts[stack]):
      layer = {}
      for ours, index, name in blocks:
        layer[ours] = _attention_from_hf(f"{stack}.block.{i}.layer.{index}.{name}", state, c.num_heads, c.head_dim)
        layer[f"{ours}_norm"] = {"scale": state[f"{stack}.block.{i}.layer.{index}.layer_norm.weight"]}
      mlp = len(blocks)
      prefix = _feed_forward_prefix(stack, i, mlp, c)
      if every and (i + 1) % every == 0:  # models.layers.repeat's sparse layers, as transformers' i % step == 1.
        experts = range(c.moe_experts)
        layer["moe"] = {"router": state[f"{prefix}.router.classifier.weight"].T, **{
            ours: np.stack([state[f"{prefix}.experts.expert_{e}.{ours}.weight"].T for e in experts])
            for ours in _mlp_names("", plain)}}
      else:
        layer["mlp"] = {ours: {"kernel": state[hf].T} for ours, hf in _mlp_names(prefix, plain).items()}
      layer["moe_norm" if "moe" in layer else "mlp_norm"] = {
          "scale": state[f"{stack}.block.{i}.layer.{mlp}.layer_norm.weight"]}
      per_layer.append(layer)
    bias = f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
    params[stack] = {
        "norm": {"scale": state[f"{stack}.final_layer_norm.weight"]}, "relative_bias": {"rel_embedding": state[bias]},
        **layers.stack(per_layer, "layers", "layer_{}", c.scan_layers, _unit(c))}
  return params
