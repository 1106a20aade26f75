"""T5 v1.1 encoder-decoder: RMSNorm without bias, gated-GELU feed-forward,
relative position biases (one table per stack, shared by its layers), no
attention scaling (folded into the initialisation, as T5), an input embedding
shared by both stacks and an untied output projection. With feed_forward
"relu", T5 v1.0's plain ReLU feed-forward layers (and experts), as the Switch
Transformer's.
"""

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from pretrain.models import attention, layers, mup
from pretrain.models.moe import MoEConfig
from pretrain.parallel import mesh as mesh_lib


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
  param_dtype: str = "float32"  # How parameters are stored (the train state casts them; see train/state.py).
  scan_layers: bool = False  # One nn.scan over each stack's layers.
  remat: str = "none"        # none | full | save_dots
  dropout: float = 0.0       # T5's places: embeddings, residual branches, inside the MLP, after the final norms.
  attention: str = "auto"    # auto | xla | splash | gpu_flash: cross-attention only (models/attention.py)
  feed_forward: str = "gated"  # gated (gated GELU, T5 v1.1) | relu (T5 v1.0, Switch)
  moe: MoEConfig = MoEConfig()  # which feed-forward layers are mixtures of experts (none by default)
  query_scale: float = 1.0   # muP's multiplier of the queries (models/mup.py)

  @classmethod
  def from_config(cls, model_cfg, vocab_size: int) -> "EncoderDecoderConfig":
    fields = layers.config_fields(cls, model_cfg)
    fields["num_decoder_layers"] = fields.get("num_decoder_layers") or model_cfg.num_layers
    return cls(vocab_size=vocab_size, **fields, moe=MoEConfig.from_config(model_cfg),
               query_scale=mup.query_scale(model_cfg))


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
    table_RN = self.param("rel_embedding", layers.partitioned(nn.initializers.normal(1.0), (None, "heads")),
                          (self.num_buckets, self.num_heads), jnp.float32)
    relative_LS = jnp.arange(key_length)[None, :] - jnp.arange(query_length)[:, None]
    buckets_LS = relative_position_bucket(relative_LS, self.bidirectional, self.num_buckets, self.max_distance)
    return jnp.transpose(table_RN[buckets_LS], (2, 0, 1))[None]


class FeedForward(nn.Module):
  """T5's feed-forward layer: gated GELU (v1.1), gelu(x Wi0) * x Wi1 then Wo, or (`gated` False) plain ReLU
  (v1.0, Switch), relu(x Wi) then Wo."""
  mlp_dim: int
  dtype: jnp.dtype = jnp.float32
  dropout: float = 0.0
  deterministic: bool = True
  gated: bool = True

  @nn.compact
  def __call__(self, x_BLD):
    dense = lambda features, axes, name: layers.Dense(features, dtype=self.dtype,
                                                      kernel_init=layers.kernel_init(*axes), name=name)
    if self.gated:
      h_BLF = nn.gelu(dense(self.mlp_dim, ("embed", "mlp"), "wi_0")(x_BLD), approximate=True)
      h_BLF = h_BLF * dense(self.mlp_dim, ("embed", "mlp"), "wi_1")(x_BLD)
    else:
      h_BLF = nn.relu(dense(self.mlp_dim, ("embed", "mlp"), "wi")(x_BLD))
    h_BLF = mesh_lib.constrain(h_BLF, ("activation_batch", "activation_length", "activation_mlp"))
    h_BLF = layers.dropout(self.dropout, self.deterministic)(h_BLF)
    return dense(x_BLD.shape[-1], ("mlp", "embed"), "wo")(h_BLF)


class T5Attention(nn.Module):
  """Attention without logit scaling, with an optional additive bias (attention.attend).

  With `decode`, self-attention appends this call's keys and values to a
  cache (as layers.Attention); cross-attention (`cross`) projects the encoder
  output once, at the first step, and reuses it.
  """
  num_heads: int
  head_dim: int
  dtype: jnp.dtype = jnp.float32
  cross: bool = False
  query_scale: float = 1.0  # muP's (models/mup.py)

  @nn.compact
  def __call__(self, x_BLD, memory_BSD, mask: attention.Mask, bias_1NLS=None, decode=False):
    d, n, h = x_BLD.shape[-1], self.num_heads, self.head_dim
    kernel = lambda name, shape, axes, i, o: self.param(
        name, layers.kernel_init(*axes, in_axis=i, out_axis=o), shape, jnp.float32).astype(self.dtype)
    wq_DNH = kernel("query", (d, n, h), ("embed", "heads", "kv"), 0, (1, 2))
    wk_DNH = kernel("key", (d, n, h), ("embed", "heads", "kv"), 0, (1, 2))
    wv_DNH = kernel("value", (d, n, h), ("embed", "heads", "kv"), 0, (1, 2))
    q_BLNH = layers.project(x_BLD, wq_DNH)
    if self.query_scale != 1:
      q_BLNH = q_BLNH * jnp.asarray(self.query_scale, q_BLNH.dtype)
    project = lambda: (layers.project(memory_BSD, wk_DNH), layers.project(memory_BSD, wv_DNH))
    if decode and self.cross:
      k_BSNH, v_BSNH = self._projected_once(project)
    else:
      k_BSNH, v_BSNH = project()
      if decode:
        k_BSNH, v_BSNH = layers.append_to_cache(self, k_BSNH, v_BSNH)
    out_BLNH = attention.attend(q_BLNH, k_BSNH, v_BSNH, mask, bias_1NLS, scale=1.0,
                                initializing=self.is_initializing())
    return layers.project(out_BLNH, kernel("out", (n, h, d), ("heads", "kv", "embed"), (0, 1), 2), contract=2)

  def _projected_once(self, project):
    initialised = self.has_variable("cache", "memory_key")
    shapes = jax.eval_shape(project)
    key = self.variable("cache", "memory_key", jnp.zeros, shapes[0].shape, shapes[0].dtype)
    value = self.variable("cache", "memory_value", jnp.zeros, shapes[1].shape, shapes[1].dtype)
    ready = self.variable("cache", "memory_ready", lambda: jnp.zeros((), jnp.bool_))
    if not initialised:
      return project()
    key.value, value.value = jax.lax.cond(ready.value, lambda: (key.value, value.value), project)
    ready.value = jnp.ones((), jnp.bool_)
    return key.value, value.value


def _mlp_branch(x_BLD, c: "EncoderDecoderConfig", deterministic: bool, dtype, drop, sparse: bool):
  """The feed-forward residual branch that ends every T5 block (called inside the block's compact __call__), or
  (`sparse`) its mixture of experts of the same form."""
  gated = c.feed_forward == "gated"
  if sparse:
    experts = c.moe.block(c.mlp_dim, "gelu" if gated else "relu", dtype)
    return layers.pre_norm_residual(x_BLD, "moe", lambda h: experts(h, deterministic), dtype, drop)
  return layers.pre_norm_residual(
      x_BLD, "mlp", FeedForward(c.mlp_dim, dtype, c.dropout, deterministic, gated, name="mlp"), dtype, drop)


class T5EncoderLayer(nn.Module):
  """One block of the encoder: bidirectional self-attention, then the feed-forward layer."""
  config: EncoderDecoderConfig
  deterministic: bool = True
  sparse: bool = False

  @nn.compact
  def __call__(self, x_BLD, mask, bias_1NLL):
    c, dtype = self.config, jnp.dtype(self.config.dtype)
    drop = layers.dropout(c.dropout, self.deterministic)
    attention = T5Attention(c.num_heads, c.head_dim, dtype, query_scale=c.query_scale, name="attention")
    x_BLD = layers.pre_norm_residual(x_BLD, "attention", lambda h_BLD: attention(h_BLD, h_BLD, mask, bias_1NLL),
                                     dtype, drop)
    return layers.block_output(_mlp_branch(x_BLD, c, self.deterministic, dtype, drop, self.sparse), c.scan_layers)


class T5DecoderLayer(nn.Module):
  """One block of the encoder-decoder's decoder: causal self-attention,
  cross-attention to the encoded inputs, then the feed-forward layer."""
  config: EncoderDecoderConfig
  deterministic: bool = True
  decode: bool = False
  sparse: bool = False

  @nn.compact
  def __call__(self, y_BTD, encoded_BSD, self_mask, cross_mask, bias_1NTC):
    c, dtype = self.config, jnp.dtype(self.config.dtype)
    drop = layers.dropout(c.dropout, self.deterministic)
    self_attention = T5Attention(c.num_heads, c.head_dim, dtype, query_scale=c.query_scale,
                                 name="self_attention")
    y_BTD = layers.pre_norm_residual(y_BTD, "self_attention", lambda h_BTD: self_attention(
        h_BTD, h_BTD, self_mask, bias_1NTC, self.decode), dtype, drop)
    cross_attention = T5Attention(c.num_heads, c.head_dim, dtype, cross=True, query_scale=c.query_scale,
                                  name="cross_attention")
    y_BTD = layers.pre_norm_residual(y_BTD, "cross_attention", lambda h_BTD: cross_attention(
        h_BTD, encoded_BSD, cross_mask, decode=self.decode), dtype, drop)
    return layers.block_output(_mlp_branch(y_BTD, c, self.deterministic, dtype, drop, self.sparse), c.scan_layers)


class Encoder(nn.Module):
  """Embedded inputs [B, S, D] -> encoded [B, S, D]."""
  config: EncoderDecoderConfig

  @nn.compact
  def __call__(self, x_BSD, segment_ids_BS, deterministic=True):
    c, dtype = self.config, jnp.dtype(self.config.dtype)
    drop = layers.dropout(c.dropout, deterministic)
    length = x_BSD.shape[1]
    bias_1NSS = RelativePositionBias(c.num_heads, True, c.relative_attention_num_buckets,
                                     c.relative_attention_max_distance, name="relative_bias")(length, length)
    mask = attention.Mask.build(c.attention, segment_ids_BS, causal=False, bias=True)
    x_BSD = layers.repeat(T5EncoderLayer, c.num_layers, c.scan_layers, c.remat, (c, deterministic),
                          drop(x_BSD), mask, bias_1NSS, moe_every=c.moe.layer_every)
    return drop(layers.RMSNorm(dtype=dtype, name="norm")(x_BSD))


class Decoder(nn.Module):
  """Embedded decoder inputs [B, T, D] and encoded inputs [B, S, D] -> final hidden states [B, T, D].

  With `decode`, positions [offset, offset + T) of the sequence are computed
  against the key/value cache: `self_mask` (explicit, [B, 1, T, C]) says which
  cached positions each query sees, and the relative bias is taken at those positions.
  """
  config: EncoderDecoderConfig

  @nn.compact
  def __call__(self, y_BTD, encoded_BSD, self_mask, cross_mask, deterministic=True, decode=False, offset=0):
    c, dtype = self.config, jnp.dtype(self.config.dtype)
    drop = layers.dropout(c.dropout, deterministic)
    bias = RelativePositionBias(c.num_heads, False, c.relative_attention_num_buckets,
                                c.relative_attention_max_distance, name="relative_bias")
    keys = self_mask.dense_B1LS.shape[-1] if decode else y_BTD.shape[1]
    bias_1NCC = bias(keys, keys)
    # C is T, or with `decode` the whole cache, of which this call's T positions take their rows.
    bias_1NTC = jax.lax.dynamic_slice_in_dim(bias_1NCC, offset, y_BTD.shape[1], axis=2) if decode else bias_1NCC
    y_BTD = layers.repeat(T5DecoderLayer, c.num_decoder_layers, c.scan_layers, c.remat, (c, deterministic, decode),
                          drop(y_BTD), encoded_BSD, self_mask, cross_mask, bias_1NTC, moe_every=c.moe.layer_every)
    return drop(layers.RMSNorm(dtype=dtype, name="norm")(y_BTD))


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
    self.encoder = Encoder(c)
    self.decoder = Decoder(c)
    self.lm_head = layers.Dense(c.vocab_size, dtype=dtype,
                                kernel_init=layers.partitioned(nn.initializers.normal(0.02), ("embed", "vocab")))

  def encode(self, tokens_BS, segment_ids_BS=None, deterministic=True):
    if segment_ids_BS is None:
      segment_ids_BS = jnp.ones_like(tokens_BS)
    return self.encoder(self.embed(tokens_BS), segment_ids_BS, deterministic)

  def decoder_logits(self, encoded_BSD, tokens_BT, encoder_segment_ids_BS=None, segment_ids_BT=None,
                     deterministic=True):
    """Logits [B, T, vocab] of every decoder position at once, without a cache
    (training and scoring; decode_step is the cached, step-by-step path)."""
    if segment_ids_BT is None:
      segment_ids_BT = jnp.ones_like(tokens_BT)
    if encoder_segment_ids_BS is None:
      encoder_segment_ids_BS = jnp.ones(encoded_BSD.shape[:2], jnp.int32)
    c = self.config
    self_mask = attention.Mask.build(c.attention, segment_ids_BT, causal=True, bias=True)
    cross_mask = attention.Mask.build(c.attention, segment_ids_BT, causal=False, key_segments_BS=encoder_segment_ids_BS)
    return self._logits(self.decoder(self.embed(tokens_BT), encoded_BSD, self_mask, cross_mask, deterministic))

  def decode_step(self, encoded_BSD, tokens_BT, offset, cache_length: int, encoder_segment_ids_BS=None):
    """Logits of decoder positions [offset, offset + T), with keys and values
    of earlier positions from the 'cache' collection (sized by an `init`
    through this method at the full length `cache_length`)."""
    if encoder_segment_ids_BS is None:
      encoder_segment_ids_BS = jnp.ones(encoded_BSD.shape[:2], jnp.int32)
    positions_T = offset + jnp.arange(tokens_BT.shape[1])
    self_mask_11TC = (jnp.arange(cache_length)[None, :] <= positions_T[:, None])[None, None]
    cross_mask_B11S = (encoder_segment_ids_BS != 0)[:, None, None, :]
    hidden_BTD = self.decoder(self.embed(tokens_BT), encoded_BSD, attention.Mask.explicit(self_mask_11TC),
                              attention.Mask.explicit(cross_mask_B11S), decode=True, offset=offset)
    return self._logits(hidden_BTD)

  def _logits(self, hidden_BTD):
    logits_BTV = self.lm_head(hidden_BTD)
    return mesh_lib.constrain(logits_BTV, ("activation_batch", "activation_length",
                                                   "activation_vocab")).astype(jnp.float32)

  def __call__(self, encoder_tokens_BS, decoder_tokens_BT, encoder_segment_ids_BS=None, decoder_segment_ids_BT=None,
               deterministic=True):
    encoded_BSD = self.encode(encoder_tokens_BS, encoder_segment_ids_BS, deterministic)
    return self.decoder_logits(encoded_BSD, decoder_tokens_BT, encoder_segment_ids_BS, decoder_segment_ids_BT,
                               deterministic)
