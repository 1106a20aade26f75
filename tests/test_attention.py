"""layers.dot_product_attention equals jax.nn.dot_product_attention, values and gradients, also in causal blocks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pretrain.models import layers

LENGTH = 256  # The shortest length taken in causal blocks.


def _inputs(num_heads=4, num_kv_heads=2, with_bias=False):
  rng = np.random.default_rng(0)
  normal = lambda *shape: jnp.asarray(rng.normal(size=shape), jnp.float32)
  q, k, v = normal(2, LENGTH, num_heads, 16), normal(2, LENGTH, num_kv_heads, 16), normal(2, LENGTH, num_kv_heads, 16)
  # Packed rows: three segments of uneven lengths, then padding (segment 0).
  segments = np.zeros((2, LENGTH), np.int32)
  segments[0, :100], segments[0, 100:130], segments[0, 130:250] = 1, 2, 3
  segments[1, :LENGTH] = 1
  mask = layers.attention_mask(jnp.asarray(segments))
  bias = normal(1, num_heads, LENGTH, LENGTH) if with_bias else None
  return (q, k, v), mask, bias


def _value_and_grads(attention, qkv):
  probe = jnp.asarray(np.random.default_rng(1).normal(size=qkv[0].shape), jnp.float32)
  loss = lambda q, k, v: jnp.sum(attention(q, k, v) * probe)
  return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))(*qkv)


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_equals_jax_attention_with_packed_segments_and_grouped_heads(causal, with_bias):
  qkv, mask, bias = _inputs(with_bias=with_bias)
  scale = 1.0 if with_bias else None  # T5's attention is unscaled and biased.
  ours = _value_and_grads(lambda q, k, v: layers.dot_product_attention(q, k, v, mask, bias, scale, causal), qkv)
  reference = _value_and_grads(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask,
                                                                             scale=scale), qkv)
  np.testing.assert_allclose(ours[0], reference[0], rtol=1e-5)
  for a, b in zip(ours[1], reference[1]):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_causal_blocks_read_only_earlier_keys():
  """The blocked form never reads a later key: changing keys after a query leaves its output as it was."""
  (q, k, v), mask, _ = _inputs()
  out = layers.dot_product_attention(q, k, v, mask, causal=True)
  later = slice(LENGTH // 2, None)
  out_changed = layers.dot_product_attention(q, k.at[:, later].set(1e3), v.at[:, later].set(jnp.nan), mask,
                                             causal=True)
  np.testing.assert_array_equal(out[:, :LENGTH // 2], out_changed[:, :LENGTH // 2])
