"""The Hugging Face architectures, one module each, listed once: which exports a run's model, which imports a
config.json's model_type; and muP's query multiplier, folded into the weights both ways."""

import jax
import numpy as np

from pretrain.hf import electra, llama, mistral, mixtral, qwen2_moe, switch_transformers, t5

# One line per architecture; of a family's, the first whose `matches` holds a run's model config exports it.
ARCHITECTURES = (llama, mixtral, qwen2_moe, t5, switch_transformers, electra, mistral)
WEIGHTS = "model.safetensors"


def architecture(family_hf: str, model_cfg):
  """The module that exports a model of the family whose `hf` is `family_hf` with this model config."""
  return next(a for a in ARCHITECTURES if a.FAMILY == family_hf and a.matches(model_cfg))


def imported(model_type: str):
  """The module that imports a config.json's model_type, or None."""
  return next((a for a in ARCHITECTURES if a.IMPORTS and a.MODEL_TYPE == model_type), None)


def scaled_queries(params, factor: float):
  """`params` with every attention's query kernel times `factor`: muP's query multiplier (models/mup.py) folded
  into the weights on export (transformers scales by 1/sqrt(head_dim) only), and out of them (1/factor) on
  import."""
  if factor == 1:
    return params
  return jax.tree_util.tree_map_with_path(
      lambda path, p: p * np.asarray(factor, p.dtype) if getattr(path[-1], "key", None) == "query" else p, params)
