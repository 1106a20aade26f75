import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from pretrain.hf import layers as hf_layers
from pretrain.models.encoder_decoder import EncoderDecoder, EncoderDecoderConfig, relative_position_bucket
from tests import numerics

CONFIG = EncoderDecoderConfig(vocab_size=200, d_model=32, num_layers=2, num_decoder_layers=3, num_heads=3,
                              head_dim=8, mlp_dim=64)
TERMS = numerics.transformer_terms(CONFIG, 12)  # Rows of up to 12 inputs.


def _t5_bucket(relative_position, bidirectional, num_buckets=32, max_distance=128):
  """T5's reference bucketing, one offset at a time."""
  bucket = 0
  n = -relative_position
  if bidirectional:
    num_buckets //= 2
    bucket += (n < 0) * num_buckets
    n = abs(n)
  else:
    n = max(n, 0)
  max_exact = num_buckets // 2
  if n < max_exact:
    return bucket + n
  large = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact))
  return bucket + min(large, num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_position_buckets_match_t5(bidirectional):
  offsets = np.arange(-300, 301)
  ours = np.asarray(relative_position_bucket(jnp.asarray(offsets), bidirectional, 32, 128))
  np.testing.assert_array_equal(ours, [_t5_bucket(int(o), bidirectional) for o in offsets])


def _model_and_params():
  model = EncoderDecoder(CONFIG)
  params = model.init(jax.random.key(0), jnp.zeros((1, 12), jnp.int32), jnp.zeros((1, 8), jnp.int32))
  return model, params


def test_one_relative_bias_table_per_stack_and_logical_axes():
  model = EncoderDecoder(CONFIG)
  boxed = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 4), jnp.int32), jnp.zeros((1, 4), jnp.int32))
  names = [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_flatten_with_path(boxed["params"])[0]]
  assert sum("rel_embedding" in n for n in names) == 2
  assert sum("['decoder']['layer_" in n and "cross_attention']['query" in n for n in names) == 3
  leaves = jax.tree.leaves(boxed["params"], is_leaf=lambda x: hasattr(x, "names"))
  assert all(len(leaf.names) == leaf.value.ndim for leaf in leaves)


@pytest.mark.slow
def test_decoder_is_causal_and_reads_the_encoder():
  model, params = _model_and_params()
  inputs = jax.random.randint(jax.random.key(1), (2, 12), 3, 200)
  targets = jax.random.randint(jax.random.key(2), (2, 8), 3, 200)
  base = model.apply(params, inputs, targets)
  later = model.apply(params, inputs, targets.at[:, 5:].set(7))
  numerics.assert_close(later[:, :5], base[:, :5], terms=TERMS)
  other_inputs = model.apply(params, inputs.at[:, -1].set(9), targets)
  numerics.assert_differs(other_inputs[:, 0], base[:, 0], terms=TERMS)


def test_packed_examples_do_not_see_each_other():
  model, params = _model_and_params()
  inputs = jax.random.randint(jax.random.key(3), (1, 12), 3, 200)
  targets = jax.random.randint(jax.random.key(4), (1, 8), 3, 200)
  encoder_segments = jnp.array([[1] * 5 + [2] * 6 + [0]])
  decoder_segments = jnp.array([[1] * 3 + [2] * 4 + [0]])
  packed = model.apply(params, inputs, targets, encoder_segments, decoder_segments)
  alone = model.apply(params, inputs[:, 5:11], targets[:, 3:7])
  numerics.assert_close(packed[:, 3:7], alone, terms=TERMS)


@pytest.mark.parametrize("scan", [False, True])
def test_kv_cache_greedy_decoding_follows_the_argmax_of_full_recomputation(scan):
  from pretrain.models import decoding  # pylint: disable=g-import-not-at-top
  model = EncoderDecoder(dataclasses.replace(CONFIG, scan_layers=scan))
  params = model.init(jax.random.key(0), jnp.zeros((1, 12), jnp.int32), jnp.zeros((1, 8), jnp.int32))
  inputs = jax.random.randint(jax.random.key(5), (2, 12), 3, 200)
  out = np.asarray(decoding.generate_encoder_decoder(model, params["params"], inputs, 6, jax.random.key(0)))
  decoder_inputs = np.concatenate([np.zeros((2, 1), np.int32), out[:, :-1]], axis=1)
  logits = model.apply(params, inputs, jnp.asarray(decoder_inputs))
  np.testing.assert_array_equal(np.asarray(jnp.argmax(logits, axis=-1)), out)


def _scanned(params):
  """Unrolled layer_i parameters of both stacks as scanned 'layers' trees."""
  params = dict(nn.meta.unbox(params)["params"])
  for stack, count in (("encoder", CONFIG.num_layers), ("decoder", CONFIG.num_decoder_layers)):
    layers = hf_layers.unstack(params[stack], "layers", "layer_{}", count)
    rest = {k: v for k, v in params[stack].items() if not k.startswith("layer_")}
    params[stack] = {**rest, **hf_layers.stack(layers, "layers", "layer_{}", scan=True)}
  return {"params": params}


@pytest.mark.slow
def test_scanned_and_unrolled_stacks_agree():
  model, params = _model_and_params()
  scanned = EncoderDecoder(dataclasses.replace(CONFIG, scan_layers=True))
  inputs = jax.random.randint(jax.random.key(6), (2, 12), 3, 200)
  targets = jax.random.randint(jax.random.key(7), (2, 8), 3, 200)
  numerics.assert_close(scanned.apply(_scanned(params), inputs, targets), model.apply(params, inputs, targets),
                        terms=TERMS)


@pytest.mark.slow
@pytest.mark.parametrize("scan", [False, True])
def test_remat_policies_give_equal_gradients(scan):
  inputs = jax.random.randint(jax.random.key(8), (2, 12), 3, 200)
  targets = jax.random.randint(jax.random.key(9), (2, 8), 3, 200)
  grads = {}
  for policy in ("none", "full", "save_dots"):
    model = EncoderDecoder(dataclasses.replace(CONFIG, remat=policy, scan_layers=scan))
    params = jax.jit(model.init)(jax.random.key(0), inputs, targets)
    # Compiled, as a train step is (one op at a time, the three policies took 22 s).
    grads[policy] = jax.jit(jax.grad(lambda p, m=model: jnp.sum(jnp.sin(m.apply(p, inputs, targets)))))(params)
  for policy in ("full", "save_dots"):
    numerics.assert_close(grads[policy], grads["none"], terms=numerics.gradient_terms(CONFIG, 2, 12), err_msg=policy)


def test_dropout_acts_in_training_only():
  model = EncoderDecoder(dataclasses.replace(CONFIG, dropout=0.3, scan_layers=True))
  inputs = jax.random.randint(jax.random.key(10), (2, 12), 3, 200)
  targets = jax.random.randint(jax.random.key(11), (2, 8), 3, 200)
  params = model.init(jax.random.key(0), inputs, targets)
  train = lambda seed: model.apply(params, inputs, targets, deterministic=False, rngs={"dropout": jax.random.key(seed)})
  evaluated = model.apply(params, inputs, targets)
  np.testing.assert_array_equal(model.apply(params, inputs, targets), evaluated)
  np.testing.assert_array_equal(train(1), train(1))
  numerics.assert_differs(train(1), evaluated, terms=TERMS)
  numerics.assert_differs(train(1), train(2), terms=TERMS)
  no_dropout = EncoderDecoder(dataclasses.replace(CONFIG, scan_layers=True))
  np.testing.assert_array_equal(no_dropout.apply(params, inputs, targets, deterministic=False,
                                                rngs={"dropout": jax.random.key(1)}), evaluated)
