"""The encoder with a sentence-pair head, for next-sentence and sentence-order prediction (BERT, ALBERT)."""

import flax.linen as nn
import jax.numpy as jnp

from pretrain.models import layers
from pretrain.models.decoder_only import DecoderOnlyConfig, EncoderOnly


class PairEncoder(nn.Module):
  """Maps a pair's tokens [B, L] to the masked-token logits [B, L, vocab] and the pair's two logits [B, 2]
  (0: B does not continue A, 1: it does), the head reading the mean of the final states (layers.mean_pool)."""
  config: DecoderOnlyConfig

  @nn.compact
  def __call__(self, tokens_BL, segment_ids_BL=None, positions_BL=None, deterministic=True):
    if segment_ids_BL is None:
      segment_ids_BL = jnp.ones_like(tokens_BL)
    logits_BLV, x_BLD = EncoderOnly(self.config, outputs="both", name="encoder")(
        tokens_BL, segment_ids_BL, positions_BL, deterministic=deterministic)
    head = nn.Dense(2, param_dtype=jnp.float32,
                    kernel_init=layers.partitioned(nn.initializers.normal(0.02), ("embed", None)),
                    bias_init=layers.partitioned(nn.initializers.zeros, (None,)), name="pair_head")
    return logits_BLV, head(layers.mean_pool(x_BLD, segment_ids_BL))
