import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pretrain.models.decoder_only import DecoderOnly, DecoderOnlyConfig, EncoderOnly
from tests import numerics

CONFIG = DecoderOnlyConfig(vocab_size=200, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                           head_dim=8, mlp_dim=64)
TERMS = numerics.transformer_terms(CONFIG, 16)  # Rows of up to 16 tokens.


def _model_and_params():
  model = DecoderOnly(CONFIG)
  params = model.init(jax.random.key(0), jnp.zeros((1, 16), jnp.int32))
  return model, params


def test_every_parameter_has_logical_axes():
  model = DecoderOnly(CONFIG)
  boxed = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
  leaves = jax.tree.leaves(boxed, is_leaf=lambda x: hasattr(x, "names"))
  assert leaves and all(len(leaf.names) == leaf.value.ndim for leaf in leaves)


@pytest.mark.parametrize("tied", [False, True])
def test_the_untrained_model_predicts_about_uniformly(tied):
  """Logits of about unit scale at initialisation, tied or not: the loss of random tokens is near ln V (a tied
  table of unit-variance rows gave logits of scale sqrt(d_model) and a loss near 30 at d_model 256)."""
  config = dataclasses.replace(CONFIG, d_model=256, head_dim=64, tie_embeddings=tied)
  tokens = jax.random.randint(jax.random.key(1), (4, 16), 3, 200)
  model = DecoderOnly(config)
  logits = model.apply(model.init(jax.random.key(0), tokens), tokens)
  loss = -jnp.take_along_axis(jax.nn.log_softmax(logits[:, :-1]), tokens[:, 1:, None], -1).mean()
  assert abs(float(loss) - np.log(200)) < 1.0


@pytest.mark.slow
def test_later_tokens_never_change_earlier_logits():
  model, params = _model_and_params()
  tokens = jax.random.randint(jax.random.key(1), (2, 16), 3, 200)
  changed = tokens.at[:, 9:].set((tokens[:, 9:] + 7) % 200)
  a = model.apply(params, tokens)
  b = model.apply(params, changed)
  numerics.assert_close(a[:, :9], b[:, :9], terms=TERMS)
  numerics.assert_differs(a[:, 9:], b[:, 9:], terms=TERMS)


def test_packed_segments_do_not_attend_to_each_other():
  model, params = _model_and_params()
  tokens = jax.random.randint(jax.random.key(2), (1, 16), 3, 200)
  segments = jnp.array([[1] * 6 + [2] * 7 + [0] * 3])
  positions = jnp.array([list(range(6)) + list(range(7)) + [0] * 3])
  packed = model.apply(params, tokens, segments, positions)
  # Changing the first segment leaves the second untouched ...
  other_first = tokens.at[:, :6].set((tokens[:, :6] + 11) % 200)
  numerics.assert_close(model.apply(params, other_first, segments, positions)[:, 6:13], packed[:, 6:13], terms=TERMS)
  # ... and the second segment's logits equal running it alone.
  alone = model.apply(params, tokens[:, 6:13])
  numerics.assert_close(alone, packed[:, 6:13], terms=TERMS)


def test_prefix_attends_bidirectionally_and_targets_causally():
  model, params = _model_and_params()
  tokens = jax.random.randint(jax.random.key(3), (1, 16), 3, 200)
  prefix = jnp.array([[1] * 6 + [0] * 10])  # decoder_causal_attention: inputs (5) plus one.
  run = lambda t: model.apply(params, t, None, None, prefix)
  base = run(tokens)
  # A later prefix token changes earlier prefix positions ...
  changed_prefix = run(tokens.at[:, 4].set((tokens[:, 4] + 5) % 200))
  numerics.assert_differs(changed_prefix[:, :4], base[:, :4], terms=TERMS)
  # ... but a target token changes nothing before it.
  changed_target = run(tokens.at[:, 10].set((tokens[:, 10] + 5) % 200))
  numerics.assert_close(changed_target[:, :10], base[:, :10], terms=TERMS)
  # Without a prefix the model is causal everywhere.
  causal = model.apply(params, tokens)
  numerics.assert_close(model.apply(params, tokens.at[:, 4].set(7))[:, :4], causal[:, :4], terms=TERMS)


def _stacked(unrolled_params, num_layers):
  """Unrolled layer_i parameters as one scanned 'layers' tree."""
  params = dict(nn.meta.unbox(unrolled_params)["params"])
  layers = [params.pop(f"layer_{i}") for i in range(num_layers)]
  params["layers"] = jax.tree.map(lambda *xs: jnp.stack(xs), *layers)
  return {"params": params}


def test_scanned_and_unrolled_layers_agree():
  model, params = _model_and_params()
  scanned = DecoderOnly(dataclasses.replace(CONFIG, scan_layers=True))
  boxed = jax.eval_shape(scanned.init, jax.random.key(0), jnp.zeros((1, 16), jnp.int32))["params"]["layers"]
  kernel = boxed["attention"]["query"]
  assert kernel.names[0] == "layers" and kernel.value.shape[0] == CONFIG.num_layers
  tokens = jax.random.randint(jax.random.key(5), (2, 16), 3, 200)
  numerics.assert_close(scanned.apply(_stacked(params, CONFIG.num_layers), tokens), model.apply(params, tokens),
                        terms=TERMS)


@pytest.mark.slow
@pytest.mark.parametrize("scan", [False, True])
def test_remat_policies_give_equal_gradients(scan):
  tokens = jax.random.randint(jax.random.key(6), (2, 16), 3, 200)
  grads = {}
  for policy in ("none", "full", "save_dots"):
    model = DecoderOnly(dataclasses.replace(CONFIG, remat=policy, scan_layers=scan))
    params = jax.jit(model.init)(jax.random.key(0), tokens)
    # Compiled, as a train step is (one op at a time, the three policies took 25 s).
    grads[policy] = jax.jit(jax.grad(lambda p, m=model: jnp.sum(jnp.sin(m.apply(p, tokens)))))(params)
  for policy in ("full", "save_dots"):
    numerics.assert_close(grads[policy], grads["none"], terms=numerics.gradient_terms(CONFIG, 2, 16), err_msg=policy)


def test_encoder_only_attends_both_ways_within_packed_examples():
  model = EncoderOnly(CONFIG)
  params = model.init(jax.random.key(0), jnp.zeros((1, 16), jnp.int32))
  tokens = jax.random.randint(jax.random.key(7), (1, 16), 3, 200)
  segments = jnp.array([[1] * 6 + [2] * 7 + [0] * 3])
  positions = jnp.array([list(range(6)) + list(range(7)) + [0] * 3])
  base = model.apply(params, tokens, segments, positions)
  later = model.apply(params, tokens.at[:, 12].set(9), segments, positions)
  numerics.assert_differs(later[:, 6:12], base[:, 6:12], terms=TERMS)  # Earlier positions see a later token ...
  numerics.assert_close(later[:, :6], base[:, :6], terms=TERMS)  # ... of their own example only.
  numerics.assert_close(model.apply(params, tokens[:, 6:13]), base[:, 6:13], terms=TERMS)


def test_dropout_acts_in_training_only():
  model = DecoderOnly(dataclasses.replace(CONFIG, dropout=0.3))
  tokens = jax.random.randint(jax.random.key(8), (2, 16), 3, 200)
  params = model.init(jax.random.key(0), tokens)
  train = lambda seed: model.apply(params, tokens, deterministic=False, rngs={"dropout": jax.random.key(seed)})
  evaluated = model.apply(params, tokens)
  np.testing.assert_array_equal(train(1), train(1))
  numerics.assert_differs(train(1), evaluated, terms=TERMS)
  numerics.assert_differs(train(1), train(2), terms=TERMS)


def test_auto_dtype_is_bfloat16_on_accelerators_only():
  from pretrain import models  # pylint: disable=g-import-not-at-top
  assert models.activation_dtype("auto", "gpu") == models.activation_dtype("auto", "tpu") == "bfloat16"
  assert models.activation_dtype("auto", "cpu") == "float32"
  assert models.activation_dtype("bfloat16", "cpu") == "bfloat16"
  from tests.conftest import tiny_run  # pylint: disable=g-import-not-at-top
  model = tiny_run("--config.model.dtype=bfloat16", vocab_size=100).model
  params = model.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(params))  # Parameters are created in float32 ...
  hidden = model.apply(params, jnp.zeros((1, 8), jnp.int32), capture_intermediates=True,
                       mutable=["intermediates"])[1]["intermediates"]["layer_0"]["__call__"][0]
  assert hidden.dtype == jnp.bfloat16  # ... activations follow model.dtype ...
  assert model.apply(params, jnp.zeros((1, 8), jnp.int32)).dtype == jnp.float32  # ... and logits are float32.


# A hand count of the TINY model (d 32, 1 layer, 2 heads of 16, MLP 64, 128 embedding rows) under pretrain/train/flops.py's
# rule: 6 FLOPs per parameter per token it multiplies (all but the input embedding) + 12 * heads * head_dim per
# query-key pair of every attention layer.
_ATTENTION, _MLP, _NORM, _HEAD = 4 * 32 * 32, 3 * 32 * 64, 32, 32 * 128
_DECODER_ONLY = 6 * (_ATTENTION + _MLP + 3 * _NORM + _HEAD) * 64 + 12 * 2 * 16 * 64 * 64  # Rows of 64 tokens.
_BUCKETS = 32 * 2  # T5's relative-position bias table, one per stack.
_ENCODER_SIDE = _ATTENTION + _MLP + 2 * _NORM + _NORM + _BUCKETS + 2 * 32 * 32  # + the cross-attention's keys, values.
_DECODER_SIDE = _ATTENTION + 2 * 32 * 32 + _MLP + 3 * _NORM + _NORM + _BUCKETS + _HEAD
_ENCODER_DECODER = (6 * (_ENCODER_SIDE * 48 + _DECODER_SIDE * 16)
                    + 12 * 2 * 16 * (48 * 48 + 16 * 16 + 16 * 48))  # Encoder, decoder and cross attention.


# ELECTRA: the discriminator as the encoder without its output layer, a 1-unit head, the generator (width 8 = 32 x
# 0.25, 1 head of 16, MLP 16) between its two projections, the generator's output through the tied embedding, both attentions.
_GENERATOR = 4 * 8 * 16 + 3 * 8 * 16 + 3 * 8
_ELECTRA = (6 * (_ATTENTION + _MLP + 3 * _NORM + 32 + 2 * 32 * 8 + _GENERATOR + _HEAD) * 64
            + 12 * (2 + 1) * 16 * 64 * 64)
_CONTRASTIVE = 2 * (_DECODER_ONLY - 6 * _HEAD * 64)  # Two views; no output layer.


@pytest.mark.parametrize("objective, expected, flops", [
    ("electra", {"targets": 64}, _ELECTRA),
    ("contrastive", {"targets": 64}, _CONTRASTIVE),
    ("clm", {"targets": 64}, _DECODER_ONLY),
    ("prefix_lm_decoder", {"targets": 48 + 16}, _DECODER_ONLY),
    ("mlm", {"targets": 64}, _DECODER_ONLY),  # The task's lengths name the row three times (inputs, targets, weights).
    ("span_corruption", {"inputs": 48, "targets": 16}, _ENCODER_DECODER),
])
def test_row_tokens_and_flops_by_hand(objective, expected, flops):
  from tests.conftest import tiny_run  # pylint: disable=g-import-not-at-top
  run = tiny_run(f"--config.data.objective={objective}", "--config.data.seq_len=64",
                 "--config.data.inputs_length=48", "--config.data.targets_length=16", "--config.model.dropout=0.1")
  assert run.family.row_lengths(run.task_lengths) == expected
  shapes = nn.meta.unbox(jax.eval_shape(lambda: run.model.init(jax.random.key(0), *run.example_args))["params"])
  assert run.flops_per_example(shapes) == flops


@pytest.mark.parametrize("contract", [1, 2])
def test_project_is_the_einsum_and_its_kernel_gradient_copies_no_activations(contract):
  """layers.project: the einsum's values and gradients, and (on the CPU) a kernel gradient that never
  copies the [B, L, ...] activations transposed, which the einsum's did (tools/bench_train.md)."""
  from pretrain.models import layers  # pylint: disable=g-import-not-at-top
  # Shapes at which the einsum's gradient did copy: 2 transposed copies of x each.
  x = jax.random.normal(jax.random.key(0), (4, 64, 8, 16) if contract == 2 else (8, 128, 64))
  kernel = jax.random.normal(jax.random.key(1), (8, 16, 96) if contract == 2 else (64, 12, 16))
  spec = "BLNH,NHD->BLD" if contract == 2 else "BLD,DNH->BLNH"
  loss = lambda f: (lambda x, w: jnp.sum(jnp.sin(f(x, w))))
  ours = jax.grad(loss(lambda x, w: layers.project(x, w, contract)), argnums=(0, 1))
  einsum = jax.grad(loss(lambda x, w: jnp.einsum(spec, x, w)), argnums=(0, 1))
  numerics.assert_as_accurate(ours(x, kernel), einsum(x, kernel), numerics.exact(einsum, x, kernel),
                              terms=x.shape[0] * x.shape[1])  # The kernel gradient's sum over B x L.
  compiled = jax.jit(ours).lower(x, kernel).compile().as_text()
  copies = [line for line in compiled.splitlines() if " transpose(" in line or " copy(" in line]
  assert not [line for line in copies if "f32[" in line and np.prod(
      [int(d) for d in line.split("f32[")[1].split("]")[0].split(",")]) >= x.size], copies
