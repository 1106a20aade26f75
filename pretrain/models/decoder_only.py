"""Decoder-only transformer (Llama layout): pre-norm blocks of attention and SwiGLU."""

import dataclasses

import flax.linen as nn
import jax.numpy as jnp

from pretrain.models import attention, layers, mup, pipeline
from pretrain.models.moe import MoEConfig
from pretrain.models.pipeline import Schedule
from pretrain.parallel import mesh as mesh_lib


@dataclasses.dataclass(frozen=True)
class DecoderOnlyConfig:
  vocab_size: int
  d_model: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  mlp_dim: int
  rope_theta: float = 10000.0
  norm_eps: float = 1e-6     # RMSNorm's epsilon (Llama 2 and Mixtral checkpoints: 1e-5)
  tie_embeddings: bool = False
  dtype: str = "float32"
  param_dtype: str = "float32"  # How parameters are stored (the train state casts them; see train/state.py).
  scan_layers: bool = False  # One nn.scan over the layers (parameters stacked on a 'layers' axis).
  remat: str = "none"        # Rematerialisation of each layer: none | full | save_dots.
  dropout: float = 0.0       # On the embeddings and each residual branch, in training.
  attention: str = "auto"    # auto | xla | splash | gpu_flash (models/attention.py)
  moe: MoEConfig = MoEConfig()  # which feed-forward layers are mixtures of experts (none by default)
  query_scale: float = 1.0   # muP's multiplier of the queries (models/mup.py)
  # Under a stage axis, the scanned layers run as this pipeline (the run sets it from the mesh and
  # train.microbatches; models/pipeline.py).
  pipeline: Schedule | None = None

  @classmethod
  def from_config(cls, model_cfg, vocab_size: int) -> "DecoderOnlyConfig":
    return cls(vocab_size=vocab_size, **layers.config_fields(cls, model_cfg), moe=MoEConfig.from_config(model_cfg),
               query_scale=mup.query_scale(model_cfg))


class DecoderOnlyLayer(nn.Module):
  """One pre-norm block of DecoderOnly (and EncoderOnly): attention, then SwiGLU (or, `sparse`, its mixture of
  experts)."""
  config: DecoderOnlyConfig
  decode: bool = False
  deterministic: bool = True
  sparse: bool = False

  @nn.compact
  def __call__(self, x_BLD, mask, positions_BL):
    c, dtype = self.config, jnp.dtype(self.config.dtype)
    drop = layers.dropout(c.dropout, self.deterministic)
    attention = layers.Attention(c.num_heads, c.num_kv_heads, c.head_dim, c.rope_theta, dtype, c.query_scale,
                                 name="attention")
    x_BLD = layers.pre_norm_residual(x_BLD, "attention", lambda h_BLD: attention(h_BLD, mask, positions_BL,
                                                                                self.decode), dtype, drop, c.norm_eps)
    if self.sparse:
      experts = c.moe.block(c.mlp_dim, "silu", dtype, per_device=c.pipeline is None or self.decode)
      x_BLD = layers.pre_norm_residual(x_BLD, "moe", lambda h: experts(h, self.deterministic), dtype, drop,
                                       c.norm_eps)
    else:
      x_BLD = layers.pre_norm_residual(x_BLD, "mlp", layers.SwiGLU(c.mlp_dim, dtype, name="mlp"), dtype, drop,
                                       c.norm_eps)
    return layers.block_output(x_BLD, c.scan_layers)


class DecoderOnly(nn.Module):
  """Maps input tokens [B, L] to next-token logits [B, L, vocab] in float32.

  `segment_ids` separate packed examples (0 marks padding); `positions` restart
  at 0 in each example. Both default to one unpacked example per row.
  `prefix_BL` (seqio's decoder_causal_attention) marks the positions that
  attend bidirectionally, for prefix-LM examples; None is purely causal.
  With `decode` (see decoding.py), keys and values go to a cache and
  `mask_B1LS` says which cached positions each query sees.
  """
  config: DecoderOnlyConfig
  outputs: str = "logits"  # logits | hidden (the final-norm states [B, L, D], no output layer) | both
  causal = True  # Whether a position sees later ones (False: EncoderOnly).

  @nn.compact
  def __call__(self, tokens_BL, segment_ids_BL=None, positions_BL=None, prefix_BL=None, decode=False,
               mask_B1LS=None, deterministic=True):
    c, dtype = self.config, jnp.dtype(self.config.dtype)
    if segment_ids_BL is None:
      segment_ids_BL = jnp.ones_like(tokens_BL)
    if positions_BL is None:
      positions_BL = jnp.broadcast_to(jnp.arange(tokens_BL.shape[-1]), tokens_BL.shape)
    # A tied table is also the output layer: rows of norm about 1 give logits of unit scale at initialisation
    # (norm sqrt(d_model), standard deviation 1, gave the untrained model a loss near 30).
    scale = c.d_model ** -0.5 if c.tie_embeddings else 1.0
    embed = nn.Embed(c.vocab_size, c.d_model, dtype=dtype, param_dtype=jnp.float32,
                     embedding_init=layers.partitioned(nn.initializers.normal(scale), ("vocab", "embed")),
                     name="embed")
    if mask_B1LS is None:
      mask = attention.Mask.build(c.attention, segment_ids_BL, self.causal, prefix_BL)
    else:
      mask = attention.Mask.explicit(mask_B1LS)
    # Initialised unpipelined: the same parameters (and random draws) for any stage count.
    layer_params = rng = None
    if c.pipeline and not (decode or self.is_initializing()):
      layer_params = self.variables["params"]["layers"]
      rng = None if deterministic or not c.dropout else self.make_rng("dropout")
    x_BLD, sown = stack(c, embed(tokens_BL), mask, positions_BL, decode, deterministic, layer_params, rng)
    if sown and self.is_mutable_collection("moe"):  # A pipeline's mixtures of experts: their terms, as a scan sows.
      self.put_variable("moe", "layers", sown)
    if self.outputs == "hidden":
      return x_BLD
    if c.tie_embeddings:
      logits_BLV = layers.tied_logits(embed, x_BLD)
    else:
      logits_BLV = layers.Dense(c.vocab_size, dtype=dtype,
                                kernel_init=layers.partitioned(nn.initializers.normal(0.02), ("embed", "vocab")),
                                name="lm_head")(x_BLD)
    logits_BLV = mesh_lib.constrain(logits_BLV, ("activation_batch", "activation_length", "activation_vocab"))
    logits_BLV = logits_BLV.astype(jnp.float32)
    return (logits_BLV, x_BLD) if self.outputs == "both" else logits_BLV


def stack(c: DecoderOnlyConfig, x_BLD, mask, positions_BL, decode: bool, deterministic: bool,
          layer_params=None, rng=None):
  """Embeddings [B, L, D] -> the final-norm states: dropout, the layers, the final norm. Called from a compact
  method, whose module holds the parameters (layer_{i} or layers, final_norm). With `layer_params` (the scanned
  layers' parameters, under a stage axis), the layers run as the pipeline c.pipeline (dropout from `rng`), and
  what their mixtures of experts sowed is returned beside the states (else {}: the layers sowed it themselves)."""
  x_BLD, sown = layers.dropout(c.dropout, deterministic)(x_BLD), {}
  if layer_params is None:
    x_BLD = layers.repeat(DecoderOnlyLayer, c.num_layers, c.scan_layers, c.remat, (c, decode, deterministic),
                          x_BLD, mask, positions_BL, moe_every=c.moe.layer_every)
  else:
    block, module_args, unit = layers.scan_unit(DecoderOnlyLayer, c.remat, (c, decode, deterministic),
                                                c.moe.layer_every)
    chunk = layers.scanned(block, c.num_layers // (unit * c.pipeline.stages * c.pipeline.repeats), 2)(
        *module_args, parent=None)

    def apply(params, x_BLD, mask, positions_BL, key):
      (x_BLD, _), sown = chunk.apply({"params": params}, x_BLD, mask, positions_BL, mutable=["moe"],
                                     rngs={} if key is None else {"dropout": key})
      return x_BLD, dict(sown)
    x_BLD, sown = pipeline.run(c.pipeline, apply, layer_params, x_BLD, mask, positions_BL, rng=rng,
                               remat=c.remat != "none")
    sown = sown.get("moe", {})
  return layers.RMSNorm(c.norm_eps, dtype=jnp.dtype(c.dtype), name="final_norm")(x_BLD), sown


class EncoderOnly(DecoderOnly):
  """The same stack attending both ways within each packed example: a BERT-style
  encoder for masked language modelling. Maps tokens [B, L] to logits [B, L, vocab]
  (or, by `outputs`, to its final states)."""
  causal = False

  def __call__(self, tokens_BL, segment_ids_BL=None, positions_BL=None, deterministic=True):
    return super().__call__(tokens_BL, segment_ids_BL, positions_BL, deterministic=deterministic)
