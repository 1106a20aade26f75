"""Attention (models/attention.py): the XLA path equals jax.nn.dot_product_attention, also in causal blocks;
each kernel (Pallas interpret mode here) equals the XLA path, values and gradients, on packed rows; and
attentions a kernel cannot express take the XLA path, saying why."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pretrain.models import attention
from tests import numerics
from tests.conftest import tiny_run

LENGTH = 256  # The shortest length taken in causal blocks; two of the kernels' tiles.
KERNELS = ("splash", "gpu_flash")


def _normal(rng, *shape):
  return jnp.asarray(rng.normal(size=shape), jnp.float32)


def _segments(length=LENGTH):
  """Packed rows: three segments of uneven lengths, then padding (segment 0); and one whole row."""
  segments = np.zeros((2, length), np.int32)
  segments[0, :100], segments[0, 100:130], segments[0, 130:length - 6] = 1, 2, 3
  segments[1, :] = 1
  return jnp.asarray(segments)


def _inputs(num_heads=4, num_kv_heads=2, with_bias=False, key_length=LENGTH):
  rng = np.random.default_rng(0)
  qkv = (_normal(rng, 2, LENGTH, num_heads, 16), _normal(rng, 2, key_length, num_kv_heads, 16),
         _normal(rng, 2, key_length, num_kv_heads, 16))
  bias = _normal(rng, 1, num_heads, LENGTH, LENGTH) if with_bias else None
  return qkv, bias


def _value_and_grads(attend, qkv):
  """attend(*qkv) under a fixed random probe, and its gradients for every argument (q, k, v, any more)."""
  probe = jnp.asarray(np.random.default_rng(1).normal(size=qkv[0].shape), jnp.float32)
  loss = lambda *args: jnp.sum(attend(*args) * probe)
  return jax.jit(jax.value_and_grad(loss, argnums=tuple(range(len(qkv)))))(*qkv)


def _assert_as_accurate(attend, reference, args):
  """attend's value and gradients are no less accurate than reference's (XLA's), both against reference's in
  float64."""
  numerics.assert_as_accurate(_value_and_grads(attend, args), _value_and_grads(reference, args),
                              numerics.exact(lambda *a: _value_and_grads(reference, a), *args),
                              terms=args[1].shape[1] + args[0].shape[-1])  # A sum over keys, a head's dot product.


@pytest.mark.parametrize("num_kv_heads", [2, 4])  # grouped query heads ([B, K, G, L, S] logits), or not
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_xla_path_equals_jax_attention_with_packed_segments(causal, with_bias, num_kv_heads):
  """Values and the gradients of q, k, v and the bias (whose batch sum is a matmul: add_batch_shared)."""
  qkv, bias = _inputs(num_kv_heads=num_kv_heads, with_bias=with_bias)
  mask = attention.Mask.build("xla", _segments(), causal)
  scale = 1.0 if with_bias else None  # T5's attention is unscaled and biased.
  args = (*qkv, bias) if with_bias else qkv
  _assert_as_accurate(lambda q, k, v, *b: attention.attend(q, k, v, mask, *b, scale=scale),
                      lambda q, k, v, *b: jax.nn.dot_product_attention(q, k, v, bias=b[0] if b else None,
                                                                       mask=mask.dense_B1LS, scale=scale), args)


def test_causal_blocks_read_only_earlier_keys():
  """The blocked form never reads a later key: changing keys after a query leaves its output as it was."""
  (q, k, v), _ = _inputs()
  mask = attention.Mask.build("xla", _segments(), causal=True)
  out = attention.attend(q, k, v, mask)
  later = slice(LENGTH // 2, None)
  out_changed = attention.attend(q, k.at[:, later].set(1e3), v.at[:, later].set(jnp.nan), mask)
  np.testing.assert_array_equal(out[:, :LENGTH // 2], out_changed[:, :LENGTH // 2])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_equals_the_xla_path(kernel, causal):
  qkv, _ = _inputs()
  mask = attention.Mask.build(kernel, _segments(), causal)
  assert mask.implementation == kernel and mask.dense_B1LS is None  # No [L, S] mask is built.
  reference_mask = attention.Mask.build("xla", _segments(), causal)
  _assert_as_accurate(lambda q, k, v: attention.attend(q, k, v, mask),
                      lambda q, k, v: attention.attend(q, k, v, reference_mask), qkv)


def test_splash_cross_attention_equals_the_xla_path():
  """Queries and keys of different lengths and segments (the encoder-decoder's cross-attention), unscaled."""
  key_length = 2 * LENGTH
  qkv, _ = _inputs(key_length=key_length)
  keys = np.zeros((2, key_length), np.int32)
  keys[0, :300], keys[0, 300:400], keys[0, 400:500] = 1, 2, 3
  keys[1, :] = 1
  masks = {name: attention.Mask.build(name, _segments(), False, key_segments_BS=jnp.asarray(keys))
           for name in ("splash", "xla")}
  assert masks["splash"].implementation == "splash"
  _assert_as_accurate(*(lambda q, k, v, m=masks[name]: attention.attend(q, k, v, m, scale=1.0)
                        for name in ("splash", "xla")), qkv)


def test_what_a_kernel_cannot_express_takes_the_xla_path_and_says_why(capsys):
  attention.log_once.cache_clear()  # Each reason is logged once per process.
  segments = _segments()
  cases = {  # (requested, Mask.build's arguments) -> the reason logged.
      ("splash", "bias"): ({"bias": True}, "takes no additive bias"),
      ("gpu_flash", "prefix"): ({"prefix_BL": jnp.ones_like(segments)}, "cannot see a per-example prefix"),
      ("gpu_flash", "cross"): ({"key_segments_BS": segments}, "takes one segment-id row for queries and keys"),
  }
  for (name, _), (kwargs, reason) in cases.items():
    mask = attention.Mask.build(name, segments, True, **kwargs)
    assert mask.implementation == "xla" and mask.dense_B1LS is not None
    assert f"attention: {name} {reason}" in capsys.readouterr().out
  assert attention.Mask.build("splash", jnp.ones((2, 200), jnp.int32), True).implementation == "xla"
  assert "needs lengths that are multiples of 128, not 200 x 200" in capsys.readouterr().out
  attention.Mask.build("splash", segments, True, bias=True)
  assert capsys.readouterr().out == ""  # Once per process.
  assert attention.choose("auto", LENGTH, LENGTH) == {"tpu": "splash", "gpu": "gpu_flash"}.get(
      jax.default_backend(), "xla")


@pytest.mark.slow
def test_a_model_with_a_kernel_trains_as_with_the_xla_path():
  """A train step's loss and gradients: the encoder-decoder with splash (its cross-attention; T5's biased
  self-attention stays on the XLA path) equals the XLA path's. tests/parallel/test_mesh_layouts.py: the decoder-only
  model with splash on 8 devices gives one device's XLA-path losses."""
  results = []
  for name in ("splash", "xla"):
    run = tiny_run("--config.data.objective=span_corruption", f"--config.model.attention={name}",
                   "--config.data.inputs_length=256", "--config.data.targets_length=128")
    state = run.create_state()
    with run.activated():
      _, metrics = run.train_step(state, run.random_batch())
    results.append(jax.device_get(metrics))
  terms = numerics.gradient_terms(run.model.config, 4, 256)  # A train step over 4 rows (TINY) of 256 inputs.
  numerics.assert_close(results[0]["loss"], results[1]["loss"], terms=terms)
  numerics.assert_close(results[0]["grad_norm"], results[1]["grad_norm"], terms=terms)


def test_init_builds_no_kernel():
  """A module's init keeps only parameters, so it runs no attention: with splash chosen, no kernel's mask tables
  (a minute of a CPU for lm_1b_128k's rows, in every memory.lower_bound) are built until a step needs them."""
  attention._eager_splash_kernel.cache_clear()  # pylint: disable=protected-access
  run = tiny_run("--config.model.attention=splash", "--config.data.seq_len=128")
  run.abstract_state()
  assert attention._eager_splash_kernel.cache_info().currsize == 0  # pylint: disable=protected-access
  with run.activated():
    jax.eval_shape(run.train_step, run.abstract_state(), run.abstract_batch())
  assert attention._eager_splash_kernel.cache_info().currsize == 1  # pylint: disable=protected-access
