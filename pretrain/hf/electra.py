"""ELECTRA's discriminator, exported as an encoder (transformers has no class of this architecture).

The tensors are Llama's names and layouts (model.embed_tokens, model.layers.N.*, model.norm: rotary positions,
RMSNorm, SwiGLU) plus `discriminator_head.weight` [1, hidden] (a token's logit that it was replaced). Unlike
Llama, every position attends to every other (`is_causal: false` in config.json), and no language-model head
is exported: the generator stays in the run's checkpoints. config.json names it PretrainElectraDiscriminator.
"""

import numpy as np

from pretrain.hf import llama
from pretrain.system.errors import UserError

ARCHITECTURE, MODEL_TYPE, FAMILY = "PretrainElectraDiscriminator", "pretrain_electra_discriminator", "electra"
IMPORTS = False  # Its generator stays in the run's checkpoints: nothing to continue pre-training from.
PREPENDS_BOS = False  # Rows start with their first token, as MLM's.


def matches(model_cfg) -> bool:
  del model_cfg
  return True


def _as_encoder(model_cfg):
  """The model config of the discriminator's layers, without an output layer."""
  model_cfg = model_cfg.copy_and_resolve_references()
  model_cfg.tie_embeddings = True  # no lm_head
  return model_cfg


def hf_config(model_cfg, vocab_size: int, max_length: int) -> dict:
  if model_cfg.get("moe_experts"):
    raise UserError("an ELECTRA model with experts (model.moe_experts) has no export here; export a dense one")
  config = llama.hf_config(_as_encoder(model_cfg), vocab_size, max_length)
  for key in ("tie_word_embeddings", "bos_token_id"):
    del config[key]
  return {**config, "architectures": [ARCHITECTURE], "model_type": MODEL_TYPE,
          "is_causal": False, "layout": "llama tensors, bidirectional attention, discriminator_head.weight [1, hidden]"}


def to_hf(params, model_cfg) -> dict[str, np.ndarray]:
  discriminator = {"embed": params["embed"], **params["discriminator"]}
  state = llama.to_hf(discriminator, _as_encoder(model_cfg))
  state["discriminator_head.weight"] = params["discriminator_head"]["kernel"].T
  return state


def from_hf(state: dict, model_cfg) -> dict:
  """The discriminator's parameters (embed, discriminator, discriminator_head) from an export."""
  params = llama.from_hf(state, _as_encoder(model_cfg))
  return {"embed": params.pop("embed"), "discriminator": params,
          "discriminator_head": {"kernel": state["discriminator_head.weight"].T}}
