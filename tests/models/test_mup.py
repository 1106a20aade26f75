"""muP (model.parameterization=mup, models/mup.py), Muon (optimizer.name=muon) and the coordinate check."""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from pretrain.models import mup
from pretrain.system.errors import UserError
from pretrain.train import optimizer
from tests import numerics
from tests.conftest import REPO, straight_and_resumed, tiny_run, train_losses

MOE = ("--config.model.moe_experts=4", "--config.model.num_layers=2", "--config.model.scan_layers=True")
ENCODER_DECODER = ("--config.data.objective=span_corruption", "--config.data.inputs_length=16",
                   "--config.data.targets_length=8")
MUP = ("--config.model.parameterization=mup", "--config.model.mup_base_width=16")  # TINY's d_model is 32: m = 2


def _by_name(tree) -> dict:
  return {jax.tree_util.keystr(p): v for p, v in jax.tree_util.tree_flatten_with_path(
      tree, is_leaf=lambda x: isinstance(x, tuple))[0]}


def test_roles_follow_the_logical_axes_in_every_family():
  roles = _by_name(tiny_run(*MOE).param_roles)
  assert roles["['embed']['embedding']"] == "input" and roles["['lm_head']['kernel']"] == "output"
  assert roles["['layers']['moe']['router']"] == "output"  # Its outputs (the experts) do not grow with the width.
  for name in ("query", "key", "value", "out"):
    assert roles[f"['layers']['attention']['{name}']"] == "hidden"
  assert roles["['layers']['moe']['wi_0']"] == roles["['layers']['moe']['wo']"] == "hidden"
  assert roles["['layers']['attention_norm']['scale']"] == roles["['final_norm']['scale']"] == "vector"
  t5 = _by_name(tiny_run(*ENCODER_DECODER).param_roles)
  assert {r for n, r in t5.items() if "rel_embedding" in n} == {"input"}
  assert t5["['lm_head']['kernel']"] == "output"
  assert all(r == "hidden" for n, r in t5.items() if n.endswith(("['query']", "['wo']['kernel']", "['out']")))
  # Batch axes (scanned layers, stacked experts) are neither inputs nor outputs.
  assert mup.split_axes(("layers", "exp", "embed", "mlp")) == ((0, 1), (2,), (3,))
  assert mup.split_axes(("layers", "heads", "kv", "embed")) == ((0,), (1, 2), (3,))


def _hand_built_adamw(opt_cfg, steps):
  """The optimizer as it was before muP and Muon: clipping, then AdamW with its decay mask."""
  return optax.chain(optax.clip_by_global_norm(opt_cfg.grad_clip), optax.adamw(
      optimizer.schedule(opt_cfg, steps), b1=opt_cfg.b1, b2=opt_cfg.b2, eps=opt_cfg.eps,
      weight_decay=opt_cfg.weight_decay, mask=optimizer.decay_mask))


def _random_like(params, seed=0):
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return jax.tree.unflatten(tree, [jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves)])


def _update(tx, params, grads):
  return tx.update(grads, tx.init(params), params)[0]


def test_the_standard_parameterization_is_unchanged():
  run = tiny_run(*MOE, "--config.optimizer.warmup_steps=0")
  assert run.init_scales is None and run.model.config.query_scale == 1
  params = run.create_state().params
  grads = _random_like(params)
  reference = _hand_built_adamw(run.cfg.optimizer, run.cfg.train.steps)
  for ours, theirs in zip(jax.tree.leaves(_update(run.tx, params, grads)),
                          jax.tree.leaves(_update(reference, params, grads))):
    np.testing.assert_array_equal(ours, theirs)


def test_mup_at_its_base_width_is_the_standard_model():
  standard = tiny_run(*MOE, "--config.optimizer.warmup_steps=0")
  base = tiny_run(*MOE, "--config.optimizer.warmup_steps=0", "--config.model.parameterization=mup",
                  "--config.model.mup_base_width=32")
  losses = []
  for run in (standard, base):
    with run.activated():
      state = run.create_state()
      state, metrics = run.train_step(state, run.random_batch())
      _, second = run.train_step(state, run.random_batch())
    losses.append((float(metrics["loss"]), float(second["loss"])))  # The initial loss, then after one update.
  numerics.assert_close(losses[1], losses[0], terms=numerics.gradient_terms(standard.model.config, 4, 32))


def test_mup_scales_the_output_initialisation_and_the_updates():
  standard, scaled = tiny_run(*MOE), tiny_run(*MOE, *MUP)
  roles = _by_name(scaled.param_roles)
  p_standard, p_scaled = (_by_name(r.create_state().params) for r in (standard, scaled))
  for name, role in roles.items():
    factor = 0.5 if role == "output" else 1.0
    numerics.assert_close(p_scaled[name], factor * p_standard[name], terms=1, err_msg=name)  # One product.
  params = standard.create_state().params
  grads = _random_like(params)
  ours, reference = (_by_name(_update(r.tx, params, grads)) for r in (scaled, standard))
  for name, role in roles.items():
    factor = 0.5 if role in ("hidden", "output") else 1.0  # base / width
    numerics.assert_close(ours[name], factor * reference[name], terms=4, err_msg=name)  # AdamW's elementwise steps.


@pytest.mark.parametrize("family", [(), ENCODER_DECODER])
def test_mup_attention_logits_scale_as_one_over_head_dim(family):
  """With the head width grown 4x from the base, the queries are halved: sqrt(base / head_dim)."""
  flags = (*family, "--config.model.parameterization=mup", "--config.model.mup_base_width=32",
           "--config.model.mup_base_head_dim=4")
  scaled, standard = tiny_run(*flags), tiny_run(*family)
  assert scaled.model.config.query_scale == 0.5
  params = scaled.create_state().params
  from pretrain.hf import scaled_queries  # pylint: disable=g-import-not-at-top
  batch = scaled.random_batch()
  ours = scaled.family.forward(scaled.model, params, batch)[0]
  folded = standard.family.forward(standard.model, scaled_queries(params, 0.5), batch)[0]
  numerics.assert_close(ours, folded, terms=numerics.transformer_terms(scaled.model.config, 32))


def test_what_mup_is_not_defined_for_is_refused():
  with pytest.raises(UserError, match="needs untied embeddings"):
    tiny_run(*MUP, "--config.model.tie_embeddings=True")
  with pytest.raises(UserError, match="Adafactor scales its steps"):
    tiny_run(*MUP, "--config.optimizer.name=adafactor")


def _newton_schulz(x, steps=5, coefficients=(3.4445, -4.7750, 2.0315)):
  """Jordan's quintic iteration on one matrix, in numpy (float64)."""
  a, b, c = coefficients
  transposed = x.shape[0] > x.shape[1]
  x = x.T if transposed else x
  x = x / (np.linalg.norm(x) + 1e-8)
  for _ in range(steps):
    g = x @ x.T
    x = a * x + (b * g + c * g @ g) @ x
  return x.T if transposed else x


def _assert_newton_schulz(actual, expected, d, f, dtype):
  """Equal to the float64 iteration up to the rounding of `dtype`. In float32, that of the sums: five iterations of
  three products of up to max(d, f) terms, after a norm of d x f. In bfloat16 each of the 15 products is rounded
  to 8 significant bits, so the matrix as a whole moves by up to 15 x eps(bfloat16) (Frobenius, relative), and by
  at least one rounding: it did run in bfloat16."""
  if dtype == "float32":
    numerics.assert_close(actual, expected, terms=5 * 3 * max(d, f) + d * f)
    return
  actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
  moved = np.linalg.norm(actual - expected) / np.linalg.norm(expected)
  assert numerics.eps(jnp.bfloat16) / 2 < moved <= 3 * optimizer.MUON_STEPS * numerics.eps(jnp.bfloat16), moved


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_muon_orthogonalises_each_layer_and_expert_on_its_own(dtype):
  run = tiny_run(*MOE, "--config.optimizer.name=muon", "--config.optimizer.warmup_steps=0",
                 "--config.optimizer.weight_decay=0", "--config.optimizer.learning_rate=1.0",
                 "--config.optimizer.grad_clip=0", f"--config.optimizer.muon_dtype={dtype}")
  params = run.create_state().params
  grads = _random_like(params)
  updates = _update(run.tx, params, grads)
  kernel, update = grads["layers"]["moe"]["wi_0"], updates["layers"]["moe"]["wi_0"]  # [layers, experts, D, F]
  assert kernel.shape[:2] == (2, 4)
  d, f = kernel.shape[2:]
  for layer in range(2):
    for expert in range(4):
      expected = -optimizer.MUON_RMS * np.sqrt(max(d, f)) * _newton_schulz(np.asarray(kernel[layer, expert],
                                                                                         np.float64))
      _assert_newton_schulz(update[layer, expert], expected, d, f, dtype)
  # Attention's [layers, D, heads, head_dim] kernel is one [D, heads x head_dim] matrix per layer.
  query, query_update = grads["layers"]["attention"]["query"], updates["layers"]["attention"]["query"]
  d, n, h = query.shape[1:]
  expected = -optimizer.MUON_RMS * np.sqrt(max(d, n * h)) * _newton_schulz(np.asarray(query[0], np.float64).reshape(
      d, n * h))
  _assert_newton_schulz(query_update[0].reshape(d, n * h), expected, d, n * h, dtype)
  # The rest is AdamW: its first step is -lr * g / (|g| + eps) for the embedding and the output layer.
  for name in ("embed", "lm_head"):
    leaf = np.asarray(jax.tree.leaves(grads[name])[0], np.float64)
    numerics.assert_close(jax.tree.leaves(updates[name])[0], -leaf / (np.abs(leaf) + run.cfg.optimizer.eps),
                          terms=4)  # AdamW's elementwise steps.


def test_muon_keeps_one_optimizer_state_in_either_dtype():
  """A run saved before optimizer.muon_dtype (float32) resumes under today's default command, bfloat16."""
  def state(dtype):
    run = tiny_run(*MOE, "--config.optimizer.name=muon", f"--config.optimizer.muon_dtype={dtype}")
    return jax.eval_shape(run.tx.init, run.create_state().params)
  float32, bfloat16 = state("float32"), state("bfloat16")
  assert jax.tree.structure(bfloat16) == jax.tree.structure(float32)
  assert jax.tree.leaves(bfloat16) == jax.tree.leaves(float32)  # Shapes and dtypes.


def test_no_gradient_clipping_at_zero():
  run = tiny_run("--config.optimizer.grad_clip=0", "--config.optimizer.warmup_steps=0")
  params = run.create_state().params
  updates = _update(run.tx, params, _random_like(params))
  assert all(float(jnp.abs(u).max()) > 0 for u in jax.tree.leaves(updates))


def test_muon_and_mup_train():
  run = tiny_run(*MOE, *MUP, "--config.optimizer.name=muon", "--config.optimizer.warmup_steps=0")
  with run.activated():
    state, batch = run.create_state(), run.random_batch()
    losses = []
    for _ in range(8):
      state, metrics = run.train_step(state, batch)
      losses.append(float(metrics["loss"]))
  assert all(b < a for a, b in zip(losses, losses[1:])) and losses[-1] < losses[0] - 0.1, losses


def test_the_coordinate_check_is_flat_under_mup_only():
  sys.path.insert(0, os.path.join(REPO, "tools"))
  import coord_check  # pylint: disable=g-import-not-at-top
  rows = coord_check.measure("decoder_only", [32, 64, 128], steps=3, learning_rate=1e-2)
  change = coord_check.slopes(rows, 3)
  for layer in ("layer_0", "layer_1"):
    assert change[("standard", layer)] > 0.4, change
    assert abs(change[("mup", layer)]) < 0.25, change
  assert change[("standard", "logits")] - change[("mup", "logits")] > 0.7, change


@pytest.mark.slow
def test_resume_after_a_kill_is_bit_identical_under_mup_and_muon(tmp_path, run_train):
  args = (*MOE, *MUP, "--config.optimizer.name=muon", "--config.train.steps=24", "--config.train.checkpoint_every=8",
          "--config.train.eval_every=24")
  straight, killed = straight_and_resumed(run_train, tmp_path, args, step=8)
  expected, losses = train_losses(straight), train_losses(killed)
  assert sorted(losses) == list(range(1, 25)) and losses == expected

