"""Encoder-decoder models with experts <-> transformers' SwitchTransformersForConditionalGeneration: T5's layout
(t5.py) with ReLU layers and experts, top-1 routing with the raw router probability, every layer or every
other one sparse. Other settings of ours are refused by name."""

from pretrain.hf import t5
from pretrain.system.console import log
from pretrain.system.errors import UserError

ARCHITECTURE, MODEL_TYPE, FAMILY = "SwitchTransformersForConditionalGeneration", "switch_transformers", "t5"
IMPORTS, PREPENDS_BOS = True, False
# transformers' Switch keeps at most this many of a row's tokens per expert (its capacity); ours is dropless, or
# has a capacity that depends on the row's length: written so large that nothing is dropped.
_NO_CAPACITY = 1 << 30


def matches(model_cfg) -> bool:
  return bool(model_cfg.get("moe_experts"))


def _check(m) -> None:
  """Refuses, naming the option, an encoder-decoder with experts that SwitchTransformers does not compute."""
  differences = {
      "model.feed_forward='gated' (Switch's layers and experts are plain ReLU: model.feed_forward='relu')":
          not t5.relu(m),
      f"model.moe_top_k={m.moe_top_k} (Switch routes each token to 1 expert)": m.moe_top_k != 1,
      "model.moe_normalize_top_k=True (Switch weighs an expert by its raw router probability: False)":
          m.moe_normalize_top_k,
      f"model.moe_every={m.moe_every} (Switch's experts are in every layer or every other one: 1 or 2)":
          m.moe_every not in (1, 2),
      f"model.moe_mlp_dim={m.moe_mlp_dim} (Switch's experts are as wide as its dense layers, model.mlp_dim)":
          m.moe_mlp_dim not in (0, m.mlp_dim),
      f"model.moe_shared_mlp_dim={m.moe_shared_mlp_dim} (Switch has no shared expert)": m.moe_shared_mlp_dim,
  }
  found = [what for what, differs in differences.items() if differs]
  if found:
    raise UserError(f"this encoder-decoder with experts cannot be exported as {ARCHITECTURE}: {'; '.join(found)}")


def hf_config(model_cfg, vocab_size: int, max_length: int) -> dict:
  del max_length  # Relative positions.
  m = model_cfg
  _check(m)
  if m.moe_capacity_factor:
    log(f"model.moe_capacity_factor={m.moe_capacity_factor}: the export drops no token (transformers' Switch "
        "capacity is set above any row's length); its outputs equal this model's wherever no token is over capacity")
  decoder_layers = m.num_decoder_layers or m.num_layers
  return {**t5.base_config(m, vocab_size), "architectures": [ARCHITECTURE], "model_type": MODEL_TYPE,
          "num_experts": m.moe_experts, "expert_capacity": _NO_CAPACITY, "encoder_sparse_step": m.moe_every,
          "decoder_sparse_step": m.moe_every, "num_sparse_encoder_layers": m.num_layers // m.moe_every,
          "num_sparse_decoder_layers": decoder_layers // m.moe_every, "router_bias": False,
          "router_jitter_noise": float(m.moe_router_jitter), "router_dtype": "float32",
          "router_ignore_padding_tokens": False, "dense_act_fn": "relu"}


def model_config(hf: dict) -> tuple[dict, list[str]]:
  """(our model.* settings, the features we cannot reproduce) of a SwitchTransformers config.json."""
  activation, step = hf.get("dense_act_fn"), hf.get("encoder_sparse_step", 1)
  settings, shared = t5.base_settings(hf, activation)
  unsupported = {
      f"dense_act_fn={activation!r} (gated-gelu or relu)": activation != "relu", **shared,
      "router_bias": hf.get("router_bias", False),
      "encoder_sparse_step and decoder_sparse_step that differ or are over 2 (experts every layer or every other)":
          step != hf.get("decoder_sparse_step", 1) or step not in (1, 2),
  }
  settings.update({"moe_experts": hf["num_experts"], "moe_top_k": 1, "moe_every": step, "moe_mlp_dim": 0,
                   "moe_shared_mlp_dim": 0, "moe_capacity_factor": 0.0, "moe_normalize_top_k": False,
                   "moe_router_jitter": float(hf.get("router_jitter_noise") or 0.0)})
  return settings, [k for k, bad in unsupported.items() if bad]


to_hf, from_hf = t5.to_hf, t5.from_hf  # T5's layout reads and writes the experts where the model config has them.
