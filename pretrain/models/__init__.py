"""Flax Linen models. Every parameter carries logical axis names (see parallel/mesh.py)."""

from pretrain.models.decoder_only import DecoderOnly, DecoderOnlyConfig
from pretrain.models.encoder_decoder import EncoderDecoder, EncoderDecoderConfig


# Embedding rows are rounded up to a multiple of this (faster matmuls).
VOCAB_MULTIPLE = 128


def build(model_cfg, vocabulary_size: int, encoder_decoder: bool):
  """The model for a config and a vocabulary: T5 encoder-decoder or decoder-only."""
  vocab_size = -(-vocabulary_size // VOCAB_MULTIPLE) * VOCAB_MULTIPLE
  if encoder_decoder:
    return EncoderDecoder(EncoderDecoderConfig.from_config(model_cfg, vocab_size))
  return DecoderOnly(DecoderOnlyConfig.from_config(model_cfg, vocab_size))


def example_args(model, lengths: dict[str, int]) -> tuple:
  """Dummy inputs of the right shapes, to initialise the model."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  if isinstance(model, EncoderDecoder):
    return jnp.zeros((1, lengths["inputs"]), jnp.int32), jnp.zeros((1, lengths["targets"]), jnp.int32)
  return (jnp.zeros((1, sum(lengths.values())), jnp.int32),)


def forward(model, params, batch):
  """Logits for a batch from seqio's feature converters."""
  if isinstance(model, EncoderDecoder):
    return model.apply({"params": params}, batch["encoder_input_tokens"], batch["decoder_input_tokens"],
                       batch["encoder_segment_ids"], batch["decoder_segment_ids"])
  return model.apply({"params": params}, batch["decoder_input_tokens"], batch["decoder_segment_ids"],
                     batch["decoder_positions"], batch.get("decoder_causal_attention"))
