"""T5 v1.1 encoder-decoder: RMSNorm without bias, gated-GELU feed-forward,
relative position biases (one table per stack, shared by its layers), no
attention scaling (folded into the initialisation, as T5), an input embedding
shared by both stacks and an untied output projection.
"""

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from pretrain.models import layers


@dataclasses.dataclass(frozen=True)
class EncoderDecoderConfig:
  vocab_size: int
  d_model: int
  num_layers: int
  num_decoder_layers: int
  num_heads: int
  head_dim: int
  mlp_dim: int
  relative_attention_num_buckets: int = 32
  relative_attention_max_distance: int = 128
  dtype: str = "float32"

  @classmethod
  def from_config(cls, model_cfg, vocab_size: int) -> "EncoderDecoderConfig":
    fields = {f.name for f in dataclasses.fields(cls)} - {"vocab_size", "num_decoder_layers"}
    return cls(vocab_size=vocab_size, num_decoder_layers=model_cfg.num_decoder_layers or model_cfg.num_layers,
               **{k: model_cfg[k] for k in fields})


def relative_position_bucket(relative_position, bidirectional: bool, num_buckets: int, max_distance: int):
  """T5's bucketing of key - query offsets: exact for small offsets, logarithmic up to max_distance."""
  bucket = 0
  if bidirectional:
    num_buckets //= 2
    bucket = (relative_position > 0).astype(jnp.int32) * num_buckets
    relative_position = jnp.abs(relative_position)
  else:
    relative_position = -jnp.minimum(relative_position, 0)
  max_exact = num_buckets // 2
  is_small = relative_position < max_exact
  safe = jnp.maximum(relative_position, 1).astype(jnp.float32)  # Offsets below max_exact take the exact branch.
  large = max_exact + (jnp.log(safe / max_exact) / math.log(max_distance / max_exact)
                       * (num_buckets - max_exact)).astype(jnp.int32)
  large = jnp.minimum(large, num_buckets - 1)
  return bucket + jnp.where(is_small, relative_position, large)


class RelativePositionBias(nn.Module):
  """[1, N, L, S] attention logit biases from bucketed relative positions."""
  num_heads: int
  bidirectional: bool
  num_buckets: int
  max_distance: int

  @nn.compact
  def __call__(self, query_length: int, key_length: int):
    table_TN = self.param("rel_embedding", layers.partitioned(nn.initializers.normal(1.0), (None, "heads")),
                          (self.num_buckets, self.num_heads), jnp.float32)
    relative_LS = jnp.arange(key_length)[None, :] - jnp.arange(query_length)[:, None]
    buckets_LS = relative_position_bucket(relative_LS, self.bidirectional, self.num_buckets, self.max_distance)
    return jnp.transpose(table_TN[buckets_LS], (2, 0, 1))[None]


def _segment_mask(query_segments_BL, key_segments_BS, causal: bool):
  mask_BLS = query_segments_BL[:, :, None] == key_segments_BS[:, None, :]
  if causal:
    mask_BLS &= jnp.tril(jnp.ones((query_segments_BL.shape[1], key_segments_BS.shape[1]), jnp.bool_))[None]
  return mask_BLS[:, None]


class GatedGelu(nn.Module):
  mlp_dim: int
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x_BLD):
    dense = lambda features, axes, name: nn.Dense(features, use_bias=False, dtype=self.dtype,
                                                  kernel_init=layers.kernel_init(*axes), name=name)
    h_BLF = nn.gelu(dense(self.mlp_dim, ("embed", "mlp"), "wi_0")(x_BLD), approximate=True)
    h_BLF = h_BLF * dense(self.mlp_dim, ("embed", "mlp"), "wi_1")(x_BLD)
    h_BLF = nn.with_logical_constraint(h_BLF, ("activation_batch", "activation_length", "activation_mlp"))
    return dense(x_BLD.shape[-1], ("mlp", "embed"), "wo")(h_BLF)


class T5Attention(nn.Module):
  """Attention without logit scaling, with an optional additive bias."""
  num_heads: int
  head_dim: int
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x_BLD, memory_BSD, mask_B1LS, bias_1NLS=None):
    d, n, h = x_BLD.shape[-1], self.num_heads, self.head_dim
    kernel = lambda name, shape, axes, i, o: self.param(
        name, layers.kernel_init(*axes, in_axis=i, out_axis=o), shape, jnp.float32).astype(self.dtype)
    q_BLNH = jnp.einsum("BLD,DNH->BLNH", x_BLD, kernel("query", (d, n, h), ("embed", "heads", "kv"), 0, (1, 2)))
    k_BSNH = jnp.einsum("BSD,DNH->BSNH", memory_BSD, kernel("key", (d, n, h), ("embed", "heads", "kv"), 0, (1, 2)))
    v_BSNH = jnp.einsum("BSD,DNH->BSNH", memory_BSD, kernel("value", (d, n, h), ("embed", "heads", "kv"), 0, (1, 2)))
    out_BLNH = jax.nn.dot_product_attention(q_BLNH, k_BSNH, v_BSNH, bias=bias_1NLS, mask=mask_B1LS, scale=1.0)
    return jnp.einsum("BLNH,NHD->BLD", out_BLNH, kernel("out", (n, h, d), ("heads", "kv", "embed"), (0, 1), 2))


class EncoderLayer(nn.Module):
  config: EncoderDecoderConfig

  @nn.compact
  def __call__(self, x_BLD, mask_B1LL, bias_1NLL):
    c, dtype = self.config, jnp.dtype(self.config.dtype)
    h_BLD = layers.RMSNorm(dtype=dtype, name="attention_norm")(x_BLD)
    x_BLD = x_BLD + T5Attention(c.num_heads, c.head_dim, dtype, name="attention")(h_BLD, h_BLD, mask_B1LL, bias_1NLL)
    x_BLD = x_BLD + GatedGelu(c.mlp_dim, dtype, name="mlp")(layers.RMSNorm(dtype=dtype, name="mlp_norm")(x_BLD))
    return nn.with_logical_constraint(x_BLD, ("activation_batch", "activation_length", "activation_embed"))


class DecoderLayer(nn.Module):
  config: EncoderDecoderConfig

  @nn.compact
  def __call__(self, y_BTD, encoded_BSD, self_mask_B1TT, cross_mask_B1TS, bias_1NTT):
    c, dtype = self.config, jnp.dtype(self.config.dtype)
    h_BTD = layers.RMSNorm(dtype=dtype, name="self_attention_norm")(y_BTD)
    y_BTD = y_BTD + T5Attention(c.num_heads, c.head_dim, dtype, name="self_attention")(
        h_BTD, h_BTD, self_mask_B1TT, bias_1NTT)
    h_BTD = layers.RMSNorm(dtype=dtype, name="cross_attention_norm")(y_BTD)
    y_BTD = y_BTD + T5Attention(c.num_heads, c.head_dim, dtype, name="cross_attention")(
        h_BTD, encoded_BSD, cross_mask_B1TS)
    y_BTD = y_BTD + GatedGelu(c.mlp_dim, dtype, name="mlp")(layers.RMSNorm(dtype=dtype, name="mlp_norm")(y_BTD))
    return nn.with_logical_constraint(y_BTD, ("activation_batch", "activation_length", "activation_embed"))


class EncoderDecoder(nn.Module):
  """Maps encoder tokens [B, S] and decoder input tokens [B, T] to logits [B, T, vocab] in float32.

  Segment ids (0 is padding) keep packed examples apart; they default to one
  example per row.
  """
  config: EncoderDecoderConfig

  def setup(self):
    c, dtype = self.config, jnp.dtype(self.config.dtype)
    self.embed = nn.Embed(c.vocab_size, c.d_model, dtype=dtype, param_dtype=jnp.float32,
                          embedding_init=layers.partitioned(nn.initializers.normal(1.0), ("vocab", "embed")))
    bias = lambda bidirectional: RelativePositionBias(c.num_heads, bidirectional, c.relative_attention_num_buckets,
                                                      c.relative_attention_max_distance)
    self.encoder_bias, self.decoder_bias = bias(True), bias(False)
    self.encoder_layers = [EncoderLayer(c) for _ in range(c.num_layers)]
    self.decoder_layers = [DecoderLayer(c) for _ in range(c.num_decoder_layers)]
    self.encoder_norm = layers.RMSNorm(dtype=dtype)
    self.decoder_norm = layers.RMSNorm(dtype=dtype)
    self.lm_head = nn.Dense(c.vocab_size, use_bias=False, dtype=dtype, param_dtype=jnp.float32,
                            kernel_init=layers.partitioned(nn.initializers.normal(0.02), ("embed", "vocab")))

  def encode(self, tokens_BS, segment_ids_BS=None):
    if segment_ids_BS is None:
      segment_ids_BS = jnp.ones_like(tokens_BS)
    length = tokens_BS.shape[1]
    x_BSD = self.embed(tokens_BS)
    mask_B1SS, bias_1NSS = _segment_mask(segment_ids_BS, segment_ids_BS, False), self.encoder_bias(length, length)
    for layer in self.encoder_layers:
      x_BSD = layer(x_BSD, mask_B1SS, bias_1NSS)
    return self.encoder_norm(x_BSD)

  def decode(self, encoded_BSD, tokens_BT, encoder_segment_ids_BS=None, segment_ids_BT=None):
    if segment_ids_BT is None:
      segment_ids_BT = jnp.ones_like(tokens_BT)
    if encoder_segment_ids_BS is None:
      encoder_segment_ids_BS = jnp.ones(encoded_BSD.shape[:2], jnp.int32)
    length = tokens_BT.shape[1]
    y_BTD = self.embed(tokens_BT)
    self_mask, cross_mask = (_segment_mask(segment_ids_BT, segment_ids_BT, True),
                             _segment_mask(segment_ids_BT, encoder_segment_ids_BS, False))
    bias_1NTT = self.decoder_bias(length, length)
    for layer in self.decoder_layers:
      y_BTD = layer(y_BTD, encoded_BSD, self_mask, cross_mask, bias_1NTT)
    logits_BTV = self.lm_head(self.decoder_norm(y_BTD))
    return nn.with_logical_constraint(logits_BTV, ("activation_batch", "activation_length",
                                                   "activation_vocab")).astype(jnp.float32)

  def __call__(self, encoder_tokens_BS, decoder_tokens_BT, encoder_segment_ids_BS=None, decoder_segment_ids_BT=None):
    encoded_BSD = self.encode(encoder_tokens_BS, encoder_segment_ids_BS)
    return self.decode(encoded_BSD, decoder_tokens_BT, encoder_segment_ids_BS, decoder_segment_ids_BT)
