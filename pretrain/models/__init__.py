"""Flax Linen models. Every parameter carries logical axis names (see parallel/mesh.py).

Which model an objective trains, and how a batch feeds it, is its family's
business (pretrain/families/).
"""

import flax.linen as nn
import jax

from pretrain.parallel import platform
from pretrain.system.errors import UserError

from pretrain.models import moe
from pretrain.models.decoder_only import DecoderOnly, DecoderOnlyConfig, EncoderOnly
from pretrain.models.electra import Electra
from pretrain.models.encoder_decoder import EncoderDecoder, EncoderDecoderConfig
from pretrain.models.pair_encoder import PairEncoder

# Embedding rows are rounded up to a multiple of this (faster matmuls).
VOCAB_MULTIPLE = 128


def activation_dtype(name: str, backend: str | None = None) -> str:
  """model.dtype: 'auto' computes in bfloat16 on accelerators (GPU, TPU) and in
  float32 on CPUs, whose bfloat16 matmuls are slow; parameters are stored in model.param_dtype."""
  if name != "auto":
    return name
  return "float32" if (backend or platform.current()) == "cpu" else "bfloat16"


def resolve(model_cfg, vocabulary_size: int):
  """(model config with model.dtype resolved, embedding rows) for a vocabulary of `vocabulary_size` ids.

  The embedding has model.vocab_size rows, or (0) the vocabulary's size
  rounded up to a multiple of VOCAB_MULTIPLE.
  """
  vocab_size = model_cfg.vocab_size or -(-vocabulary_size // VOCAB_MULTIPLE) * VOCAB_MULTIPLE
  if vocab_size < vocabulary_size:
    raise UserError(f"model.vocab_size={vocab_size} is smaller than the vocabulary's {vocabulary_size} ids; "
                    "use 0 (the vocabulary's size, rounded up) or a larger value")
  model_cfg = model_cfg.copy_and_resolve_references()
  model_cfg.dtype = activation_dtype(model_cfg.dtype)
  return model_cfg, vocab_size


def mode(dropout_rng=None) -> dict:
  """apply() arguments: with `dropout_rng`, training mode (dropout on); without, deterministic."""
  return {"deterministic": dropout_rng is None, "rngs": {} if dropout_rng is None else {"dropout": dropout_rng}}


def apply(model, params, *args, dropout_rng=None, **kwargs):
  """model.apply in training mode with `dropout_rng` (dropout on), else deterministic: (its outputs, what its
  mixture-of-experts layers sowed, by moe.collected: {} for a dense model)."""
  outputs, state = model.apply({"params": params}, *args, mutable=["moe"], **mode(dropout_rng), **kwargs)
  return outputs, moe.collected(state.get("moe", {}))


def check_shapes(params, expected, what: str) -> None:
  """Raises a UserError naming the first parameter of `expected` (shapes from
  the model config) that `params` (arrays or checkpoint metadata) lack or shape differently."""
  got = {jax.tree_util.keystr(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]}
  for path, leaf in jax.tree_util.tree_flatten_with_path(nn.meta.unbox(expected))[0]:
    name = jax.tree_util.keystr(path)
    if name not in got:
      raise UserError(f"{what} lacks the parameter {name} that the model config implies (model.scan_layers, the "
                      "family or the depth differ); the checkpoint and its config do not belong together")
    if tuple(got[name].shape) != tuple(leaf.shape):
      raise UserError(f"{what}: parameter {name} has shape {tuple(got[name].shape)}, but the model config implies "
                      f"{tuple(leaf.shape)}; the checkpoint and its config do not belong together")
