"""Flax Linen models. Every parameter carries logical axis names (see parallel/mesh.py).

The objective's feature converter decides the family: `lm` and `prefix_lm`
examples train the decoder-only model, `enc_dec` the T5 encoder-decoder and
`encoder` (MLM) the encoder-only model.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from pretrain.errors import UserError

from pretrain.models.decoder_only import DecoderOnly, DecoderOnlyConfig, EncoderOnly
from pretrain.models.encoder_decoder import EncoderDecoder, EncoderDecoderConfig

# Embedding rows are rounded up to a multiple of this (faster matmuls).
VOCAB_MULTIPLE = 128


def activation_dtype(name: str, backend: str | None = None) -> str:
  """model.dtype: 'auto' computes in bfloat16 on accelerators (GPU, TPU) and in
  float32 on CPUs, whose bfloat16 matmuls are slow; parameters stay float32."""
  if name != "auto":
    return name
  return "float32" if (backend or jax.default_backend()) == "cpu" else "bfloat16"


def build(model_cfg, vocabulary_size: int, converter: str):
  """The model for a config, a vocabulary and the objective's feature converter.

  The embedding has model.vocab_size rows, or (0) the vocabulary's size
  rounded up to a multiple of VOCAB_MULTIPLE.
  """
  vocab_size = model_cfg.get("vocab_size") or -(-vocabulary_size // VOCAB_MULTIPLE) * VOCAB_MULTIPLE
  if vocab_size < vocabulary_size:
    raise UserError(f"model.vocab_size={vocab_size} is smaller than the vocabulary's {vocabulary_size} ids; "
                    "use 0 (the vocabulary's size, rounded up) or a larger value")
  model_cfg = model_cfg.copy_and_resolve_references()
  model_cfg.dtype = activation_dtype(model_cfg.get("dtype", "float32"))
  if converter == "enc_dec":
    return EncoderDecoder(EncoderDecoderConfig.from_config(model_cfg, vocab_size))
  config = DecoderOnlyConfig.from_config(model_cfg, vocab_size)
  return EncoderOnly(config) if converter == "encoder" else DecoderOnly(config)


def example_args(model, lengths: dict[str, int]) -> tuple:
  """Dummy inputs of the right shapes, to initialise the model."""
  if isinstance(model, EncoderDecoder):
    return jnp.zeros((1, lengths["inputs"]), jnp.int32), jnp.zeros((1, lengths["targets"]), jnp.int32)
  if isinstance(model, EncoderOnly):
    return (jnp.zeros((1, lengths["inputs"]), jnp.int32),)
  return (jnp.zeros((1, sum(lengths.values())), jnp.int32),)


def row_lengths(model, lengths: dict[str, int]) -> dict[str, int]:
  """Tokens each row puts through the model: {'inputs', 'targets'} for an encoder-decoder (encoder and
  decoder), else {'targets': the row} (a prefix-LM row holds inputs and targets; an MLM row is one sequence)."""
  args = example_args(model, lengths)
  if isinstance(model, EncoderDecoder):
    return {"inputs": args[0].shape[1], "targets": args[1].shape[1]}
  return {"targets": args[0].shape[1]}


def forward(model, params, batch, dropout_rng=None):
  """Logits for a batch from the feature converters; with `dropout_rng`, in training mode (dropout on)."""
  kwargs = {"deterministic": dropout_rng is None, "rngs": {} if dropout_rng is None else {"dropout": dropout_rng}}
  if isinstance(model, EncoderDecoder):
    return model.apply({"params": params}, batch["encoder_input_tokens"], batch["decoder_input_tokens"],
                       batch["encoder_segment_ids"], batch["decoder_segment_ids"], **kwargs)
  if isinstance(model, EncoderOnly):
    return model.apply({"params": params}, batch["encoder_input_tokens"], batch["encoder_segment_ids"],
                       batch["encoder_positions"], **kwargs)
  return model.apply({"params": params}, batch["decoder_input_tokens"], batch["decoder_segment_ids"],
                     batch["decoder_positions"], batch.get("decoder_causal_attention"), **kwargs)


def targets_and_weights(batch):
  """The tokens to predict and where the loss applies."""
  if "encoder_target_tokens" in batch:
    return batch["encoder_target_tokens"], batch["encoder_loss_weights"]
  return batch["decoder_target_tokens"], batch["decoder_loss_weights"]


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
