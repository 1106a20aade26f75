"""The mixture-of-experts block against a plain loop over tokens and experts, its two dispatches against each
other, and its dropped share and auxiliary losses against hand computations."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pretrain.models import moe

B, L, D, E, F = 2, 5, 8, 4, 16


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
      gate, up = x[t] @ w["wi_0"][e], x[t] @ w["wi_1"][e]
      y[t] += weight * ((gate / (1 + np.exp(-gate)) * up) @ w["wo"][e])
  return y.reshape(x_BLD.shape)


@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("capacity_factor", [0.0, 8.0], ids=["dropless", "ample_capacity"])
def test_outputs_equal_the_loop_over_tokens_and_experts(top_k, capacity_factor):
  block = _block(top_k=top_k, capacity_factor=capacity_factor, normalize_top_k=top_k > 1)
  params, x = _params_and_input(block)
  y, state = block.apply({"params": params}, x, mutable=["moe"])
  np.testing.assert_allclose(y, _loop(params, x, top_k, normalize_top_k=top_k > 1), atol=1e-5)
  assert float(state["moe"]["dropped"][0]) == 0.0


def test_capacity_and_dropless_dispatch_give_the_same_outputs_and_gradients_when_nothing_is_dropped():
  dropless, ample = _block(), _block(capacity_factor=float(E))
  params, x = _params_and_input(dropless, seed=3)

  def loss(block, params, x):
    y = block.apply({"params": params}, x, mutable=["moe"])[0]
    return jnp.sum(y * jnp.cos(jnp.arange(y.size).reshape(y.shape)))

  grads = [jax.jit(jax.grad(functools.partial(loss, block), argnums=(0, 1)))(params, x) for block in (dropless, ample)]
  for a, b in zip(jax.tree.leaves(grads[0]), jax.tree.leaves(grads[1])):
    np.testing.assert_allclose(a, b, atol=1e-5)
  assert jax.tree.reduce(lambda s, g: s + float(jnp.abs(g).sum()), grads[0], 0.0) > 0


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
  np.testing.assert_allclose(analytic, numerical, rtol=1e-3)


def test_tokens_over_capacity_are_dropped_and_counted():
  """Every token prefers expert 0: with capacity 1 x 10 / 4 -> 3, the first 3 tokens are computed, 7 dropped."""
  block = _block(top_k=1, capacity_factor=1.0, normalize_top_k=False)
  params, x = _params_and_input(block)
  params = {**params, "router": jnp.zeros((D, E)).at[:, 0].set(1.0)}
  x = jnp.abs(x) + 0.1  # Positive inputs: expert 0's logit the largest for every token.
  y, state = block.apply({"params": params}, x, mutable=["moe"])
  assert moe.capacity(B * L, E, 1.0) == 3
  np.testing.assert_allclose(float(state["moe"]["dropped"][0]), 0.7, atol=1e-6)
  y = np.asarray(y).reshape(-1, D)
  assert np.abs(y[:3]).min(axis=1).all() > 0 and not np.abs(y[3:]).any()
  np.testing.assert_allclose(y[:3], _loop(params, x, 1, normalize_top_k=False).reshape(-1, D)[:3], atol=1e-5)
  np.testing.assert_allclose(state["moe"]["load"][0], [1.0, 0, 0, 0])


def test_auxiliary_losses_by_hand():
  logits = jnp.asarray([[2.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 3.0, 0.0]])
  weights, experts, probs = moe.route(logits, top_k=1, normalize_top_k=False)
  assert experts[:, 0].tolist() == [0, 1, 2]
  aux = moe.auxiliary(logits, probs, experts, 4)
  p = np.exp(np.asarray(logits, np.float64))
  p /= p.sum(axis=1, keepdims=True)
  load = np.asarray([1, 1, 1, 0]) / 3
  np.testing.assert_allclose(aux["load"], load)
  np.testing.assert_allclose(aux["load_balance"], 4 * np.sum(load * p.mean(axis=0)), rtol=1e-6)
  lse = np.log(np.exp(np.asarray(logits, np.float64)).sum(axis=1))
  np.testing.assert_allclose(aux["z_loss"], np.mean(lse ** 2), rtol=1e-6)
  np.testing.assert_allclose(weights[:, 0], p.max(axis=1), rtol=1e-6)
  # Perfectly balanced routing with uniform probabilities: the load-balancing loss is 1.
  uniform = moe.auxiliary(jnp.zeros((4, 4)), jnp.full((4, 4), 0.25), jnp.arange(4)[:, None], 4)
  np.testing.assert_allclose(uniform["load_balance"], 1.0)


def test_shared_experts_add_a_gated_swiglu_and_jitter_only_trains():
  block = _block(shared_mlp_dim=12, router_jitter=0.1)
  params, x = _params_and_input(block)
  assert set(params) == {"router", "wi_0", "wi_1", "wo", "shared_gate", "shared"}
  routed = _block().apply({"params": {k: params[k] for k in ("router", "wi_0", "wi_1", "wo")}}, x, mutable=["moe"])[0]
  gate = jax.nn.sigmoid(x @ params["shared_gate"]["kernel"])
  shared = nn.apply(lambda m, v: m(v), _shared(12))({"params": params["shared"]}, x)
  y = block.apply({"params": params}, x, mutable=["moe"])[0]
  np.testing.assert_allclose(y, routed + gate * shared, atol=1e-5)
  noisy = block.apply({"params": params}, x, deterministic=False, mutable=["moe"],
                      rngs={"dropout": jax.random.PRNGKey(0)})[0]
  assert not np.allclose(noisy, y)  # Some token's weights moved with the jittered router input.


def _shared(width):
  from pretrain.models import layers  # pylint: disable=g-import-not-at-top
  return layers.SwiGLU(width)
