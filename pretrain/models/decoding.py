"""Sampling continuations from a decoder-only or an encoder-decoder model.

A decoder-only model decodes with a key/value cache: one pass over the prompt
(bidirectional for a prefix-LM model, as in training), then one token at a
time. The encoder-decoder path encodes once, then decodes one token at a time
against the cache of its decoder's self-attention.
"""

import functools

import jax
import jax.numpy as jnp


def sample_next(logits_BV, rng, temperature: float, num_valid: int, top_k: int = 0, top_p: float = 1.0):
  """Greedy at temperature 0, else a draw from softmax(logits / temperature),
  restricted to the `top_k` most likely tokens and to the smallest set whose
  probability reaches `top_p`."""
  logits_BV = jnp.where(jnp.arange(logits_BV.shape[-1]) < num_valid, logits_BV, -jnp.inf)
  if temperature == 0.0:
    return jnp.argmax(logits_BV, axis=-1)
  logits_BV = logits_BV / temperature
  if 0 < top_k < num_valid:  # A k of the whole vocabulary or more keeps every token.
    kth_B1 = jax.lax.top_k(logits_BV, top_k)[0][:, -1:]
    logits_BV = jnp.where(logits_BV < kth_B1, -jnp.inf, logits_BV)
  if top_p < 1.0:
    sorted_BV = jnp.sort(logits_BV, axis=-1)[:, ::-1]
    probs_BV = jax.nn.softmax(sorted_BV, axis=-1)
    keep_BV = jnp.cumsum(probs_BV, axis=-1) - probs_BV < top_p  # Always keeps the most likely token.
    threshold_B1 = jnp.min(jnp.where(keep_BV, sorted_BV, jnp.inf), axis=-1, keepdims=True)
    logits_BV = jnp.where(logits_BV < threshold_B1, -jnp.inf, logits_BV)
  return jax.random.categorical(rng, logits_BV, axis=-1)


def generate(model, params, prompt_BP, max_new_tokens: int, rng, temperature: float = 0.0, top_k: int = 0,
             top_p: float = 1.0, num_valid: int | None = None, prefix_lm: bool = False, prompt_lengths_B=None):
  """Continues each prompt row by `max_new_tokens` tokens with a KV cache; returns them [B, max_new_tokens].

  Rows may be prompts of different lengths, left-padded to one (`prompt_lengths_B`: each row's own; the padding
  is neither attended to nor counted in positions), so that prompts of a few padded lengths share compilations."""
  batch, prompt_len = prompt_BP.shape
  run = _decoder_only(model, batch, prompt_len, max_new_tokens, float(temperature), top_k, top_p,
                      num_valid or model.config.vocab_size, prefix_lm)
  lengths_B = jnp.full((batch,), prompt_len) if prompt_lengths_B is None else jnp.asarray(prompt_lengths_B)
  return run(params, prompt_BP, (prompt_len - lengths_B).astype(jnp.int32), rng)


@functools.lru_cache(maxsize=64)  # One compilation per model and shape, reused by later calls (lm-eval's requests).
def _decoder_only(model, batch: int, prompt_len: int, max_new_tokens: int, temperature: float, top_k: int,
                  top_p: float, num_valid: int, prefix_lm: bool):
  total = prompt_len + 1 + max_new_tokens
  sample = lambda logits_BV, key: sample_next(logits_BV, key, temperature, num_valid, top_k, top_p).astype(jnp.int32)
  cache_shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((batch, total), jnp.int32),
                                                   decode=True))["cache"]
  key_positions_S = jnp.arange(total)

  def forward(params, cache, tokens_BL, start, pad_B, prefill: bool):
    # Cache slots are shared by the rows; a row's positions start after its left padding.
    slots_L = start + jnp.arange(tokens_BL.shape[1])
    visible_LS = key_positions_S[None, :] <= slots_L[:, None]
    if prefill and prefix_lm:  # The prompt (with the leading 0) is the prefix: it attends both ways.
      visible_LS |= key_positions_S[None, :] < tokens_BL.shape[1]
    visible_BLS = visible_LS[None] & (key_positions_S[None, None, :] >= pad_B[:, None, None])
    logits_BLV, variables = model.apply(
        {"params": params, "cache": cache}, tokens_BL, positions_BL=slots_L[None, :] - pad_B[:, None],
        decode=True, mask_B1LS=visible_BLS[:, None], mutable=["cache"])
    return logits_BLV[:, -1], variables["cache"]

  @jax.jit
  def run(params, prompt_BP, pad_B, rng):
    cache = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), cache_shapes)
    # Inputs are the targets shifted right, starting with id 0, as in training: a left-padded row's 0 just before
    # its prompt is that row's start.
    first_BL = jnp.concatenate([jnp.zeros((batch, 1), jnp.int32), prompt_BP], axis=1)
    logits_BV, cache = forward(params, cache, first_BL, 0, pad_B, prefill=True)
    rng, key = jax.random.split(rng)
    generated_BG = jnp.zeros((batch, max_new_tokens), jnp.int32).at[:, 0].set(sample(logits_BV, key))

    def step(i, carry):
      generated_BG, cache, rng = carry
      previous_B1 = jax.lax.dynamic_slice_in_dim(generated_BG, i - 1, 1, axis=1)
      logits_BV, cache = forward(params, cache, previous_B1, prompt_len + i, pad_B, prefill=False)
      rng, key = jax.random.split(rng)
      return generated_BG.at[:, i].set(sample(logits_BV, key)), cache, rng

    generated_BG, _, _ = jax.lax.fori_loop(1, max_new_tokens, step, (generated_BG, cache, rng))
    return generated_BG

  return run


def generate_encoder_decoder(model, params, inputs_BS, max_new_tokens: int, rng, temperature: float = 0.0,
                             top_k: int = 0, top_p: float = 1.0, num_valid: int | None = None):
  """Decodes `max_new_tokens` target tokens for each row of encoder inputs; returns them [B, max_new_tokens].

  Encodes once, then feeds one decoder token per step against the key/value
  cache of the decoder's self-attention. Input id 0 is padding.
  """
  run = _encoder_decoder(model, inputs_BS.shape[0], max_new_tokens, float(temperature), top_k, top_p,
                         num_valid or model.config.vocab_size)
  return run(params, inputs_BS, rng)


@functools.lru_cache(maxsize=64)
def _encoder_decoder(model, batch: int, max_new_tokens: int, temperature: float, top_k: int, top_p: float,
                     num_valid: int):
  sample = lambda logits_BV, key: sample_next(logits_BV, key, temperature, num_valid, top_k, top_p).astype(jnp.int32)

  @jax.jit
  def run(params, inputs_BS, rng):
    segments_BS = (inputs_BS != 0).astype(jnp.int32)
    encoded_BSD = model.apply({"params": params}, inputs_BS, segments_BS, method=model.encode)
    step_args = lambda tokens_BT, offset: (encoded_BSD, tokens_BT, offset, max_new_tokens, segments_BS)
    cache = model.init(jax.random.key(0), *step_args(jnp.zeros((batch, max_new_tokens), jnp.int32), 0),
                       method=model.decode_step)["cache"]
    cache = jax.tree.map(jnp.zeros_like, cache)

    def step(i, carry):
      generated_BG, cache, rng = carry
      # The decoder reads the targets shifted right, starting with id 0, as in training.
      previous_B1 = jnp.where(i == 0, 0, jax.lax.dynamic_slice_in_dim(generated_BG, jnp.maximum(i - 1, 0), 1, axis=1))
      logits_B1V, variables = model.apply({"params": params, "cache": cache}, *step_args(previous_B1, i),
                                          method=model.decode_step, mutable=["cache"])
      rng, key = jax.random.split(rng)
      return generated_BG.at[:, i].set(sample(logits_B1V[:, 0], key)), variables["cache"], rng

    generated_BG = jnp.zeros((batch, max_new_tokens), jnp.int32)
    generated_BG, _, _ = jax.lax.fori_loop(0, max_new_tokens, step, (generated_BG, cache, rng))
    return generated_BG

  return run
