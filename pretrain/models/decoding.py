"""Sampling continuations from a decoder-only or an encoder-decoder model.

Each new token recomputes the whole (fixed-length) sequence, which is simple
and exact; it suits the short samples printed at the end of a run.
"""

import jax
import jax.numpy as jnp


def sample_next(logits_BV, rng, temperature: float, num_valid: int):
  """Greedy at temperature 0, else a draw from softmax(logits / temperature)."""
  logits_BV = jnp.where(jnp.arange(logits_BV.shape[-1]) < num_valid, logits_BV, -jnp.inf)
  if temperature == 0.0:
    return jnp.argmax(logits_BV, axis=-1)
  return jax.random.categorical(rng, logits_BV / temperature, axis=-1)


def generate(model, params, prompt_BP, max_new_tokens: int, rng, temperature: float = 0.0,
             num_valid: int | None = None):
  """Continues each prompt row by `max_new_tokens` tokens; returns them [B, max_new_tokens]."""
  batch, prompt_len = prompt_BP.shape
  num_valid = num_valid or model.config.vocab_size
  # Inputs are the targets shifted right, starting with id 0, as in training.
  tokens_BT = jnp.zeros((batch, prompt_len + max_new_tokens + 1), jnp.int32)
  tokens_BT = tokens_BT.at[:, 1:prompt_len + 1].set(prompt_BP)

  @jax.jit
  def run(params, tokens_BT, rng):
    def step(i, carry):
      tokens_BT, rng = carry
      rng, step_rng = jax.random.split(rng)
      logits_BV = model.apply({"params": params}, tokens_BT)[:, i]
      next_B = sample_next(logits_BV, step_rng, temperature, num_valid)
      return tokens_BT.at[:, i + 1].set(next_B.astype(jnp.int32)), rng

    tokens_BT, _ = jax.lax.fori_loop(prompt_len, prompt_len + max_new_tokens, step, (tokens_BT, rng))
    return tokens_BT[:, prompt_len + 1:]

  return run(params, tokens_BT, rng)


def generate_encoder_decoder(model, params, inputs_BS, max_new_tokens: int, rng, temperature: float = 0.0,
                             num_valid: int | None = None):
  """Decodes `max_new_tokens` target tokens for each row of encoder inputs; returns them [B, max_new_tokens]."""
  num_valid = num_valid or model.config.vocab_size
  tokens_BT = jnp.zeros((inputs_BS.shape[0], max_new_tokens + 1), jnp.int32)  # Starts with id 0, as in training.

  @jax.jit
  def run(params, inputs_BS, tokens_BT, rng):
    encoded_BSD = model.apply({"params": params}, inputs_BS, method=model.encode)

    def step(i, carry):
      tokens_BT, rng = carry
      rng, step_rng = jax.random.split(rng)
      logits_BV = model.apply({"params": params}, encoded_BSD, tokens_BT, method=model.decode)[:, i]
      next_B = sample_next(logits_BV, step_rng, temperature, num_valid)
      return tokens_BT.at[:, i + 1].set(next_B.astype(jnp.int32)), rng

    tokens_BT, _ = jax.lax.fori_loop(0, max_new_tokens, step, (tokens_BT, rng))
    return tokens_BT[:, 1:]

  return run(params, inputs_BS, tokens_BT, rng)
