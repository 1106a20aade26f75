"""Flax Linen models. Every parameter carries logical axis names (see parallel/mesh.py).

The objective's feature converter decides the family: `lm` and `prefix_lm`
examples train the decoder-only model, `enc_dec` the T5 encoder-decoder and
`encoder` (MLM) the encoder-only model.
"""

import jax.numpy as jnp

from pretrain.models.decoder_only import DecoderOnly, DecoderOnlyConfig, EncoderOnly
from pretrain.models.encoder_decoder import EncoderDecoder, EncoderDecoderConfig

# Embedding rows are rounded up to a multiple of this (faster matmuls).
VOCAB_MULTIPLE = 128


def build(model_cfg, vocabulary_size: int, converter: str):
  """The model for a config, a vocabulary and the objective's feature converter."""
  vocab_size = -(-vocabulary_size // VOCAB_MULTIPLE) * VOCAB_MULTIPLE
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


def forward(model, params, batch):
  """Logits for a batch from the feature converters."""
  if isinstance(model, EncoderDecoder):
    return model.apply({"params": params}, batch["encoder_input_tokens"], batch["decoder_input_tokens"],
                       batch["encoder_segment_ids"], batch["decoder_segment_ids"])
  if isinstance(model, EncoderOnly):
    return model.apply({"params": params}, batch["encoder_input_tokens"], batch["encoder_segment_ids"],
                       batch["encoder_positions"])
  return model.apply({"params": params}, batch["decoder_input_tokens"], batch["decoder_segment_ids"],
                     batch["decoder_positions"], batch.get("decoder_causal_attention"))


def targets_and_weights(batch):
  """The tokens to predict and where the loss applies."""
  if "encoder_target_tokens" in batch:
    return batch["encoder_target_tokens"], batch["encoder_loss_weights"]
  return batch["decoder_target_tokens"], batch["decoder_loss_weights"]
