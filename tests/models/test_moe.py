"""The mixture-of-experts block against a plain loop over tokens and experts, its two dispatches against each
other, and its dropped share and auxiliary losses against hand computations."""

import functools
import json
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pretrain.models import moe
from tests import numerics
from tests.conftest import REPO, fake_devices

B, L, D, E, F = 2, 5, 8, 4, 16
BLOCK_TERMS = D + E + D + F  # The router's dot product and softmax, then an expert's two projections.


def _block(**fields):
  return moe.MoE(**{"num_experts": E, "top_k": 2, "mlp_dim": F, **fields})


def _params_and_input(block, seed=0):
  x = jax.random.normal(jax.random.PRNGKey(seed), (B, L, D))
  return nn.meta.unbox(block.init(jax.random.PRNGKey(seed + 1), x)["params"]), x


def _loop(params, x_BLD, top_k, normalize_top_k=True):
  """Token by token, expert by expert: the definition."""
  x = np.asarray(x_BLD, np.float64).reshape(-1, D)
  w = {k: np.asarray(v, np.float64) for k, v in params.items()}
  y = np.zeros_like(x)
  for t in range(len(x)):
    logits = x[t] @ w["router"]
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    chosen = np.argsort(-probs, kind="stable")[:top_k]
    weights = probs[chosen] / (probs[chosen].sum() if normalize_top_k else 1.0)
    for e, weight in zip(chosen, weights):
      if "wi" in w:  # A plain ReLU expert (T5 v1.0, Switch).
        hidden = np.maximum(x[t] @ w["wi"][e], 0.0)
      else:  # SwiGLU.
        gate, up = x[t] @ w["wi_0"][e], x[t] @ w["wi_1"][e]
        hidden = gate / (1 + np.exp(-gate)) * up
      y[t] += weight * (hidden @ w["wo"][e])
  return y.reshape(x_BLD.shape)


@pytest.mark.parametrize("activation", ["silu", "relu"])
@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("capacity_factor", [0.0, 8.0], ids=["dropless", "ample_capacity"])
def test_outputs_equal_the_loop_over_tokens_and_experts(top_k, capacity_factor, activation):
  block = _block(top_k=top_k, capacity_factor=capacity_factor, normalize_top_k=top_k > 1, activation=activation)
  params, x = _params_and_input(block)
  y, state = block.apply({"params": params}, x, mutable=["moe"])
  numerics.assert_close(y, _loop(params, x, top_k, normalize_top_k=top_k > 1), terms=BLOCK_TERMS)
  assert float(state["moe"]["dropped"][0]) == 0.0


def test_capacity_and_dropless_dispatch_give_the_same_outputs_and_gradients_when_nothing_is_dropped():
  dropless, ample = _block(), _block(capacity_factor=float(E))
  params, x = _params_and_input(dropless, seed=3)

  def loss(block, params, x):
    y = block.apply({"params": params}, x, mutable=["moe"])[0]
    return jnp.sum(y * jnp.cos(jnp.arange(y.size).reshape(y.shape)))

  grads = [jax.jit(jax.grad(functools.partial(loss, block), argnums=(0, 1)))(params, x) for block in (dropless, ample)]
  numerics.assert_close(grads[0], grads[1], terms=BLOCK_TERMS + B * L)  # Kernels' gradients sum over the tokens.
  assert jax.tree.reduce(lambda s, g: s + float(jnp.abs(g).sum()), grads[0], 0.0) > 0


@pytest.mark.parametrize("activation", ["silu", "relu"])
def test_blocked_grouped_matmuls_equal_ragged_dot_with_their_gradients(activation):
  """The CPU path (blocks of one expert's rows) against jax.lax.ragged_dot, for groups of every size: empty, one
  row, over a block, all rows of one expert; gated experts (SwiGLU) and plain ones (ReLU, one input kernel)."""
  k = jax.random.split(jax.random.PRNGKey(0), 4)
  x = jax.random.normal(k[0], (300, D))
  shapes = [(E, D, F), (E, D, F), (E, F, D)] if activation == "silu" else [(E, D, F), (E, F, D)]
  kernels = tuple(jax.random.normal(key, shape) / np.sqrt(shape[1]) for key, shape in zip(k[1:], shapes))
  for sizes in ([0, 1, 150, 149], [300, 0, 0, 0], [75, 75, 75, 75]):
    group_sizes = jnp.asarray(sizes, jnp.int32)
    ragged = lambda x, w, g=group_sizes: jnp.sum(jnp.sin(moe.experts(x, w, activation, group_sizes_E=g)))
    blocked = lambda x, w, g=group_sizes: jnp.sum(jnp.sin(moe.blocked_experts(x, w, activation, g, block=64)))
    ours, reference = (jax.value_and_grad(f, argnums=(0, 1))(x, kernels) for f in (blocked, ragged))
    exact = numerics.exact(jax.value_and_grad(ragged, argnums=(0, 1)), x, kernels)
    numerics.assert_as_accurate(ours, reference, exact, terms=300 + F, err_msg=str(sizes))  # An expert's rows.


def test_the_grouped_matmul_setting_chooses_the_dropless_kernels():
  """model.moe_grouped_matmul: ragged_dot and blocks give the same outputs, each by its own kernels (auto: blocks on
  CPUs)."""
  outputs = {}
  for setting in ("ragged_dot", "blocks", "auto"):
    block = _block(grouped_matmul=setting)
    params, x = _params_and_input(block)
    jaxpr = str(jax.make_jaxpr(lambda p, x, b=block: b.apply({"params": p}, x, mutable=["moe"])[0])(params, x))
    assert ("ragged_dot" in jaxpr) == (setting == "ragged_dot"), setting
    outputs[setting] = block.apply({"params": params}, x, mutable=["moe"])[0]
  numerics.assert_close(outputs["ragged_dot"], outputs["blocks"], terms=BLOCK_TERMS)


def test_gradients_equal_the_loop_s():
  """Dropless against the float64 loop's numerical gradient along a random direction of the parameters."""
  block = _block()
  params, x = _params_and_input(block, seed=5)
  direction = jax.tree.map(lambda p: jax.random.normal(jax.random.PRNGKey(7), p.shape), params)
  target = np.cos(np.arange(B * L * D)).reshape(B, L, D)

  def ours(p):
    return jnp.sum(block.apply({"params": p}, x, mutable=["moe"])[0] * target)

  step = 1e-4
  shifted = [jax.tree.map(lambda p, d, s=s: np.asarray(p, np.float64) + s * step * np.asarray(d), params, direction)
             for s in (1, -1)]
  numerical = (np.sum(_loop(shifted[0], x, 2) * target) - np.sum(_loop(shifted[1], x, 2) * target)) / (2 * step)
  analytic = sum(float(jnp.sum(g * d)) for g, d in zip(jax.tree.leaves(jax.jit(jax.grad(ours))(params)),
                                                        jax.tree.leaves(direction)))
  # The float32 gradient's rounding: the block's, the sum over tokens, then over every parameter (the float64
  # central difference's own error, about step^2 x the third derivative, is far below it).
  numerics.assert_close(analytic, numerical, terms=BLOCK_TERMS + B * L + sum(p.size for p in jax.tree.leaves(params)))


def test_tokens_over_capacity_are_dropped_and_counted():
  """Every token prefers expert 0: with capacity 1 x 5 / 4 -> 2 in each row of 5 tokens, each row's first 2
  tokens are computed, 3 dropped."""
  block = _block(top_k=1, capacity_factor=1.0, normalize_top_k=False)
  params, x = _params_and_input(block)
  params = {**params, "router": jnp.zeros((D, E)).at[:, 0].set(1.0)}
  x = jnp.abs(x) + 0.1  # Positive inputs: expert 0's logit the largest for every token.
  y, state = block.apply({"params": params}, x, mutable=["moe"])
  assert moe.capacity(L, E, 1.0) == 2
  numerics.assert_close(float(state["moe"]["dropped"][0]), 0.6, terms=B * L)  # A mean over the tokens.
  y, expected = np.asarray(y), _loop(params, x, 1, normalize_top_k=False)
  assert np.abs(y[:, :2]).min(axis=-1).all() > 0 and not np.abs(y[:, 2:]).any()
  numerics.assert_close(y[:, :2], expected[:, :2], terms=BLOCK_TERMS)
  numerics.assert_close(state["moe"]["load"][0], [1.0, 0, 0, 0], terms=B * L)


def test_auxiliary_losses_by_hand():
  logits = jnp.asarray([[2.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 3.0, 0.0]])
  weights, experts, probs = moe.route(logits, top_k=1, normalize_top_k=False)
  assert experts[:, 0].tolist() == [0, 1, 2]
  aux = moe.auxiliary(logits, probs, experts, 4)
  p = np.exp(np.asarray(logits, np.float64))
  p /= p.sum(axis=1, keepdims=True)
  load = np.asarray([1, 1, 1, 0]) / 3
  terms = 3 + 4 + 4  # Means over 3 tokens, sums over 4 experts and each softmax's.
  numerics.assert_close(aux["load"], load, terms=terms)
  numerics.assert_close(aux["load_balance"], 4 * np.sum(load * p.mean(axis=0)), terms=terms)
  lse = np.log(np.exp(np.asarray(logits, np.float64)).sum(axis=1))
  numerics.assert_close(aux["z_loss"], np.mean(lse ** 2), terms=terms)
  numerics.assert_close(weights[:, 0], p.max(axis=1), terms=terms)
  # Perfectly balanced routing with uniform probabilities: the load-balancing loss is 1.
  uniform = moe.auxiliary(jnp.zeros((4, 4)), jnp.full((4, 4), 0.25), jnp.arange(4)[:, None], 4)
  numerics.assert_close(uniform["load_balance"], 1.0, terms=terms)


def test_shared_experts_add_a_gated_swiglu_and_jitter_only_trains():
  block = _block(shared_mlp_dim=12, router_jitter=0.1)
  params, x = _params_and_input(block)
  assert set(params) == {"router", "wi_0", "wi_1", "wo", "shared_gate", "shared"}
  routed = _block().apply({"params": {k: params[k] for k in ("router", "wi_0", "wi_1", "wo")}}, x, mutable=["moe"])[0]
  gate = jax.nn.sigmoid(x @ params["shared_gate"]["kernel"])
  shared = nn.apply(lambda m, v: m(v), _shared(12))({"params": params["shared"]}, x)
  y = block.apply({"params": params}, x, mutable=["moe"])[0]
  numerics.assert_close(y, routed + gate * shared, terms=BLOCK_TERMS + 12)
  noisy = block.apply({"params": params}, x, deterministic=False, mutable=["moe"],
                      rngs={"dropout": jax.random.PRNGKey(0)})[0]
  numerics.assert_differs(noisy, y, terms=BLOCK_TERMS + 12)  # Some token's weights moved with the jittered input.


def _shared(width):
  from pretrain.models import layers  # pylint: disable=g-import-not-at-top
  return layers.SwiGLU(width)


# The block in the models: tiny decoder-only and T5 stacks.
MODEL = dict(vocab_size=64, d_model=16, num_heads=2, head_dim=8, mlp_dim=32)


def _decoder_only(moe_config, **fields):
  from pretrain.models import DecoderOnly, DecoderOnlyConfig  # pylint: disable=g-import-not-at-top
  return DecoderOnly(DecoderOnlyConfig(**{**MODEL, "num_layers": 4, "num_kv_heads": 2, "moe": moe_config, **fields}))


def _encoder_decoder(moe_config, **fields):
  from pretrain.models import EncoderDecoder, EncoderDecoderConfig  # pylint: disable=g-import-not-at-top
  return EncoderDecoder(EncoderDecoderConfig(**{**MODEL, "num_layers": 2, "num_decoder_layers": 2,
                                                "moe": moe_config, **fields}))


def _as_experts(dense_params, sparse_params, num_experts):
  """`sparse_params` with every MoE layer's experts copies of the dense model's feed-forward layer there."""
  def convert(dense, sparse):
    if not isinstance(sparse, dict):
      return dense
    if "moe" in sparse:
      mlp = dense["mlp"]
      experts = {name: jnp.stack([mlp[name]["kernel"]] * num_experts) for name in ("wi_0", "wi_1", "wo")}
      dense = {**{k: v for k, v in dense.items() if k not in ("mlp", "mlp_norm")},
               "moe": {**sparse["moe"], **experts}, "moe_norm": dense["mlp_norm"]}
    return {k: convert(dense[k], v) for k, v in sparse.items()}
  return convert(dense_params, sparse_params)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["decoder_only", "encoder_decoder"])
def test_experts_that_copy_the_dense_layer_give_the_dense_model(family):
  """Every token's k weights sum to 1, so identical experts compute the dense feed-forward layer: the model's
  logits are the dense model's, every other layer (Switch) or every layer."""
  build = _decoder_only if family == "decoder_only" else _encoder_decoder
  tokens = jax.random.randint(jax.random.PRNGKey(0), (2, 8), 3, 64)
  args = (tokens,) if family == "decoder_only" else (tokens, tokens[:, ::-1])
  dense = build(moe.MoEConfig())
  dense_params = nn.meta.unbox(dense.init(jax.random.PRNGKey(1), *args)["params"])
  for every in (1, 2):
    sparse = build(moe.MoEConfig(experts=E, top_k=2, every=every))
    params = _as_experts(dense_params, nn.meta.unbox(sparse.init(jax.random.PRNGKey(2), *args)["params"]), E)
    logits, state = sparse.apply({"params": params}, *args, mutable=["moe"])
    numerics.assert_close(logits, dense.apply({"params": dense_params}, *args),
                          terms=numerics.transformer_terms(dense.config, 8) + 4 * BLOCK_TERMS)
    layers_with_experts = moe.collected(state["moe"])["load"].shape[0]
    assert layers_with_experts == 4 // every  # Four layers in either model.


def _unstack(scanned, every):
  """Parameters of a scanned stack (layers/..., or layers/block_j/... in units of `every`) as layer_{i}/..."""
  out = {k: v for k, v in scanned.items() if k != "layers"}
  units = scanned["layers"] if every > 1 else {"block_0": scanned["layers"]}
  size = len(units)
  for j, unit in units.items():
    for u in range(jax.tree.leaves(unit)[0].shape[0]):
      out[f"layer_{u * size + int(j.split('_')[1])}"] = jax.tree.map(lambda x, u=u: x[u], unit)
  return out


@pytest.mark.slow
@pytest.mark.parametrize("every", [1, 2])
def test_a_scanned_stack_places_its_experts_as_the_unrolled_one(every):
  tokens = jax.random.randint(jax.random.PRNGKey(0), (2, 8), 3, 64)
  config = moe.MoEConfig(experts=E, top_k=2, every=every)
  scanned = _decoder_only(config, scan_layers=True)
  params = nn.meta.unbox(scanned.init(jax.random.PRNGKey(3), tokens)["params"])
  logits, state = scanned.apply({"params": params}, tokens, mutable=["moe"])
  unrolled_logits, unrolled_state = _decoder_only(config).apply({"params": _unstack(params, every)}, tokens,
                                                                mutable=["moe"])
  terms = numerics.transformer_terms(scanned.config, 8) + 4 * BLOCK_TERMS
  numerics.assert_close(logits, unrolled_logits, terms=terms)
  for name, values in moe.collected(state["moe"]).items():
    numerics.assert_close(values, moe.collected(unrolled_state["moe"])[name], terms=terms, err_msg=name)


@pytest.mark.slow
def test_the_loss_holds_the_weighted_auxiliary_terms_and_the_metrics_keep_them_apart():
  from tests.conftest import tiny_run  # pylint: disable=g-import-not-at-top
  flags = ("--config.model.moe_experts=4", "--config.model.num_layers=2", "--config.model.moe_every=2")
  runs = {weights: tiny_run(*flags, f"--config.loss.moe_load_balance={weights[0]}",
                            f"--config.loss.moe_z_loss={weights[1]}") for weights in ((0.0, 0.0), (0.5, 0.25))}
  plain, weighted = runs.values()
  params = nn.meta.unbox(plain.create_state().params)
  batch = plain.random_batch()
  sums = [jax.device_get(r.family.loss_sums(r.model, params, batch, r.cfg.loss)) for r in runs.values()]
  assert sums[0]["cross_entropy"] == sums[1]["cross_entropy"] and sums[0]["moe_load"].shape == (1, 4)
  extra = 0.5 * sums[1]["moe_load_balance"] + 0.25 * sums[1]["moe_z_loss"]
  terms = numerics.transformer_terms(plain.model.config, 32) + 4 * 32  # Sums over TINY's 4 rows of 32 tokens.
  numerics.assert_close(sums[1]["loss"] - sums[0]["loss"], extra, terms=terms, magnitude=float(sums[1]["loss"]))
  assert sums[1]["moe_load_balance"] > 0.9 * sums[1]["weight"]  # The mean over tokens is >= 1, times the weight.
  metrics = weighted.family.eval_metrics(sums[1])
  assert metrics["loss"] == pytest.approx(sums[1]["cross_entropy"] / sums[1]["weight"])
  numerics.assert_close(sum(metrics[f"moe_load/layer_0/expert_{e}"] for e in range(4)), 1.0, terms=terms)
  assert {"moe_load_balance", "moe_z_loss", "moe_dropped"} <= set(weighted.family.train_metrics(sums[1]))


def test_flops_count_the_active_experts_only():
  """top_k experts of width F / top_k multiply a token as one dense layer of width F does: the FLOPs differ by the
  router alone."""
  from tests.conftest import tiny_run  # pylint: disable=g-import-not-at-top
  dense = tiny_run("--config.model.mlp_dim=64")
  sparse = tiny_run("--config.model.moe_experts=8", "--config.model.moe_top_k=2", "--config.model.moe_mlp_dim=32")
  flops = [r.family.flops_per_example(nn.meta.unbox(r.create_state().params), r.cfg.model, r.task_lengths)
           for r in (dense, sparse)]
  router = 6 * 32 * 8 * 32  # 6 x d_model x experts per token, 32 tokens a row
  assert flops[1] - flops[0] == router


@pytest.mark.parametrize("flags, message", [
    (("--config.model.moe_top_k=5",), "model.moe_top_k=5 is more than the 4 experts"),
    (("--config.model.moe_every=2", "--config.model.scan_layers=True", "--config.model.num_layers=3"),
     "model.num_layers=3 is not a multiple"),
    (("--config.data.objective=contrastive", "--config.model.dropout=0.1"), "does not take the experts"),
    (("--config.mesh.expert=3",), "does not split over mesh.expert=3"),
    (("--config.model.feed_forward=relu",), "model.feed_forward='relu' is for the encoder-decoder"),
])
def test_settings_the_model_cannot_take_are_refused(flags, message):
  from pretrain.system.errors import UserError  # pylint: disable=g-import-not-at-top
  from tests.conftest import tiny_run  # pylint: disable=g-import-not-at-top
  with pytest.raises(UserError, match=message):
    tiny_run("--config.model.moe_experts=4", *flags)


def mesh_rules(preset):
  from pretrain.parallel import mesh as mesh_lib  # pylint: disable=g-import-not-at-top
  return mesh_lib.PRESETS[preset]


# Dropless dispatch partitioned over 8 (fake CPU) devices, in a subprocess (`python -m tests.models.test_moe`): name ->
# ((data, fsdp, expert, context, tensor), rules). Rows and experts gathered over the expert axis, summed over
# tensor; the t5x rules; experts replicated (data_parallel); rows not split over the expert axis (experts' shares
# summed).
PARTITIONED = {"data2_expert4": ((2, 1, 4, 1, 1), "fsdp_tensor"),
               "data2_fsdp2_expert2": ((2, 2, 2, 1, 1), "fsdp_tensor"),
               "data2_expert2_tensor2": ((2, 1, 2, 1, 2), "fsdp_tensor"),
               "t5x_fsdp2_expert2_tensor2": ((1, 2, 2, 1, 2), "t5x"),
               "data_parallel_4x2": ((4, 2, 1, 1, 1), "data_parallel"),
               "rows_over_data_only": ((2, 1, 4, 1, 1), (("activation_batch", "data"),) + tuple(
                   (name, axes) for name, axes in mesh_rules("fsdp_tensor") if name != "activation_batch"))}
ROWS = 8  # The batch's rows, split over up to 8 devices.


def _partitioned_outputs_and_gradients(layout=None):
  """The MoE block's outputs and gradients (dropless, gated experts), on one device or under `layout`."""
  from pretrain.parallel import mesh as mesh_lib  # pylint: disable=g-import-not-at-top
  block = _block(top_k=2)
  x = jax.random.normal(jax.random.PRNGKey(0), (ROWS, L, D))
  boxed = block.init(jax.random.PRNGKey(1), x)["params"]
  params = nn.meta.unbox(boxed)
  target = jnp.cos(jnp.arange(ROWS * L * D).reshape(ROWS, L, D))
  loss = lambda p, x: jnp.sum(block.apply({"params": p}, x, mutable=["moe"])[0] * target)
  step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
  if layout is None:
    return step(params, x), ""
  sizes, rules = layout
  rules = mesh_rules(rules) if isinstance(rules, str) else rules
  sizes = dict(zip(("data", "fsdp", "expert", "context", "tensor"), sizes))
  mesh = jax.make_mesh(tuple(sizes.get(axis, 1) for axis in mesh_lib.AXES), mesh_lib.AXES,
                       axis_types=(jax.sharding.AxisType.Auto,) * len(mesh_lib.AXES))
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    params = jax.device_put(params, nn.logical_to_mesh_sharding(nn.get_partition_spec(boxed), mesh, rules))
    x = jax.device_put(x, nn.logical_to_mesh_sharding(jax.sharding.PartitionSpec("activation_batch"), mesh, rules))
    return step(params, x), step.lower(params, x).compile().as_text()


@pytest.mark.slow
def test_dropless_dispatch_partitioned_over_devices_gives_one_device_s_outputs_and_gradients():
  """Each layout's loss and gradients equal one device's; with an expert axis, no collective makes a whole expert
  kernel [E, D, F] or its gradient (XLA's partitioning of the global sort did, for both)."""
  env = fake_devices(8)
  result = subprocess.run([sys.executable, "-m", "tests.models.test_moe"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  runs = json.loads(result.stdout.strip().splitlines()[-1])
  (value, grads), _ = _partitioned_outputs_and_gradients()
  for name, run in runs.items():
    terms = BLOCK_TERMS + ROWS * L * D  # The loss sums every output.
    numerics.assert_close(run["loss"], float(value), terms=terms, err_msg=name)
    numerics.assert_close([np.asarray(g) for g in run["grads"]], jax.tree.leaves(grads), terms=terms, err_msg=name)
    if PARTITIONED[name][0][2] > 1:  # Split over the expert axis: no device holds all experts' kernels or gradients.
      assert not run["whole_kernels"], name


if __name__ == "__main__":
  assert jax.device_count() == 8, "run with XLA_FLAGS=--xla_force_host_platform_device_count=8"
  results = {}
  for name, layout in PARTITIONED.items():
    (value, grads), hlo = _partitioned_outputs_and_gradients(layout)
    collectives = [line.split("=")[1] for line in hlo.splitlines() if " all-gather(" in line or " all-reduce(" in line]
    results[name] = {"loss": float(value), "grads": [np.asarray(g).tolist() for g in jax.tree.leaves(grads)],
                     "whole_kernels": any(f"f32[{E},{D},{F}]" in c or f"f32[{E},{F},{D}]" in c for c in collectives)}
  print(json.dumps(results))


@pytest.mark.slow
def test_a_model_trained_with_capacity_can_generate_and_score_dropless(tmp_path, run_train, capsys):
  """Its export is dropless (transformers' capacity is written large): --dropless runs it so here too; without
  it the run keeps its training capacity and says so."""
  from pretrain import run as run_lib  # pylint: disable=g-import-not-at-top
  from pretrain.commands import generate  # pylint: disable=g-import-not-at-top
  workdir = tmp_path / "switch"
  flags = ("--config.data.objective=span_corruption", "--config.model.moe_experts=4", "--config.model.moe_top_k=1",
           "--config.model.moe_capacity_factor=0.5", "--config.train.steps=2")
  assert (result := run_train(workdir, *flags)).returncode == 0, result.stderr
  capacity, params, _ = run_lib.load(str(workdir), pipeline=False)
  assert "drops tokens past its experts' capacity (model.moe_capacity_factor=0.5)" in capsys.readouterr().out
  dropless, _, _ = run_lib.load(str(workdir), pipeline=False, dropless=True)
  assert dropless.cfg.model.moe_capacity_factor == 0 and capacity.cfg.model.moe_capacity_factor == 0.5
  batch = capacity.random_batch()
  kept, routed = (r.family.forward(r.model, params, batch)[0] for r in (capacity, dropless))
  assert np.abs(np.asarray(kept) - np.asarray(routed)).max() > 1e-3  # Half the tokens' experts were skipped.
  generate.main([f"--workdir={workdir}", "--prompt=Return the", "--max_new_tokens=3", "--dropless"])
  assert "drops tokens" not in capsys.readouterr().out
