"""ELECTRA (Clark et al. 2020): replaced-token detection.

A small generator (an encoder, `generator_size` of the discriminator's width
at the same depth) predicts the masked tokens (MLM); its samples replace
them, and the discriminator (the encoder that is kept) tells, at every
position, whether the token is the original. The two share the token
embeddings, as in the paper; the generator reads them through a projection
to its width and predicts through the tied embedding matrix. A sampled token
equal to the original counts as original.
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from pretrain.models import attention, layers
from pretrain.models.decoder_only import DecoderOnlyConfig, stack


def replaced(corrupted_BL, targets_BL, weights_BL):
  """The discriminator's labels: True where a masked position's token differs from the original (a sample equal
  to the original counts as original, as in the paper)."""
  return (corrupted_BL != targets_BL) & (weights_BL > 0)


def generator_heads(num_heads: int, size: float) -> int:
  return max(1, round(num_heads * size))


def generator_config(c: DecoderOnlyConfig, size: float) -> DecoderOnlyConfig:
  """The generator's config: `size` of the discriminator's width and feed-forward width, as ELECTRA scales its
  hidden size, and of its heads (at least one), at the same depth and head width."""
  heads = generator_heads(c.num_heads, size)
  return dataclasses.replace(c, d_model=max(1, round(c.d_model * size)), num_heads=heads, num_kv_heads=heads,
                             mlp_dim=max(1, round(c.mlp_dim * size)))


class Encoder(nn.Module):
  """Embeddings [B, L, D] -> final states: a bidirectional stack of DecoderOnly's layers."""
  config: DecoderOnlyConfig

  @nn.compact
  def __call__(self, x_BLD, segment_ids_BL, positions_BL, deterministic=True):
    mask = attention.Mask.build(self.config.attention, segment_ids_BL, False, None)
    return stack(self.config, x_BLD, mask, positions_BL, False, deterministic)[0]


def _dense(features: int, dtype):
  return layers.Dense(features, dtype=dtype, kernel_init=layers.partitioned(nn.initializers.normal(0.02), ("embed", None)))


class Electra(nn.Module):
  config: DecoderOnlyConfig  # the discriminator's
  generator_size: float = 0.25

  def setup(self):
    c, dtype = self.config, jnp.dtype(self.config.dtype)
    g = generator_config(c, self.generator_size)
    self.embed = nn.Embed(c.vocab_size, c.d_model, dtype=dtype, param_dtype=jnp.float32,
                          embedding_init=layers.partitioned(nn.initializers.normal(1.0), ("vocab", "embed")))
    self.generator_in = _dense(g.d_model, dtype)
    self.generator = Encoder(g)
    self.generator_out = _dense(c.d_model, dtype)
    self.discriminator = Encoder(c)
    self.discriminator_head = _dense(1, dtype)

  def discriminate(self, tokens_BL, segment_ids_BL, positions_BL, deterministic=True):
    """(logits [B, L] that each token was replaced, the discriminator's final states [B, L, D])."""
    x_BLD = self.discriminator(self.embed(tokens_BL), segment_ids_BL, positions_BL, deterministic)
    return self.discriminator_head(x_BLD)[..., 0].astype(jnp.float32), x_BLD

  def __call__(self, inputs_BL, targets_BL=None, weights_BL=None, segment_ids_BL=None, positions_BL=None,
               sample_rng=None, deterministic=True):
    """`inputs` (masked), `targets` (the originals), `weights` (1 at the masked positions) ->
    {'generator_logits' [B, L, V] (float32), 'corrupted' [B, L] (the discriminator's input: the generator's
    samples at the masked positions, the originals elsewhere), 'discriminator_logits' [B, L]}."""
    targets_BL = inputs_BL if targets_BL is None else targets_BL
    weights_BL = jnp.zeros_like(inputs_BL) if weights_BL is None else weights_BL
    segment_ids_BL = jnp.ones_like(inputs_BL) if segment_ids_BL is None else segment_ids_BL
    if positions_BL is None:
      positions_BL = jnp.broadcast_to(jnp.arange(inputs_BL.shape[-1]), inputs_BL.shape)
    h_BLG = self.generator(self.generator_in(self.embed(inputs_BL)), segment_ids_BL, positions_BL, deterministic)
    generator_logits_BLV = layers.tied_logits(self.embed, self.generator_out(h_BLG)).astype(jnp.float32)
    sample_rng = jax.random.key(0) if sample_rng is None else sample_rng
    sampled_BL = jax.random.categorical(sample_rng, jax.lax.stop_gradient(generator_logits_BLV))
    corrupted_BL = jnp.where(weights_BL > 0, sampled_BL, targets_BL).astype(inputs_BL.dtype)
    discriminator_logits_BL, _ = self.discriminate(corrupted_BL, segment_ids_BL, positions_BL, deterministic)
    return {"generator_logits": generator_logits_BLV, "corrupted": corrupted_BL,
            "discriminator_logits": discriminator_logits_BL}
