"""pretrain.bench.matmul_floor finds every matrix product a step runs, counts it as often as it runs, and times
the same product in XLA and torch."""

import collections

import jax
import jax.numpy as jnp
import pytest

from pretrain.bench import matmul_floor
from pretrain.commands import bench
from tests.conftest import tiny_run


def test_counts_the_gradient_and_each_iteration_of_a_scan():
  batch, width, depth = 4, 8, 3

  def loss(ws_LDD, x_BD):
    def layer(h_BD, w_DD):
      return jnp.tanh(h_BD @ w_DD), None
    return jnp.sum(jax.lax.scan(layer, x_BD, ws_LDD)[0])

  ws, x = jnp.ones((depth, width, width)), jnp.ones((batch, width))
  dots = matmul_floor.dots_of(jax.make_jaxpr(jax.jit(jax.grad(loss)))(ws, x))
  assert sum(dots.values()) == 3 * depth  # Forward, the input's and the weight's gradient, per layer.
  assert sum(d.flops * n for d, n in dots.items()) == 3 * depth * 2 * batch * width * width
  assert all(d.dtype == "float32" and d.output_dtype == "float32" for d in dots)


def test_a_cond_counts_its_costliest_branch():
  def f(x_DD, pick):
    return jax.lax.cond(pick, lambda: x_DD @ x_DD @ x_DD, lambda: x_DD @ x_DD)

  dots = matmul_floor.dots_of(jax.make_jaxpr(f)(jnp.ones((4, 4)), True))
  assert sum(dots.values()) == 2


def test_a_training_step_holds_its_model_flops_and_microbatches_change_no_product():
  flops = {}
  for microbatches in (1, 2):
    run = tiny_run("--config.data.objective=clm", f"--config.train.microbatches={microbatches}")
    state = run.create_state()
    with run.activated():
      dots = matmul_floor.dots_of(jax.make_jaxpr(run.train_step)(state, run.random_batch()))
    flops[microbatches] = sum(d.flops * n for d, n in dots.items())
  assert flops[1] == flops[2]  # Half the rows, twice: the scan over microbatches counts its length.
  _, model_flops = bench.tokens_and_flops(run, state.params)
  # The model's count (6 per parameter per token, attention not halved for the causal mask) against the
  # products themselves: at this length the attention is computed whole, so they nearly agree.
  assert 0.95 < flops[1] / model_flops < 1.05


@pytest.mark.parametrize("lhs_shape, rhs_shape, numbers, sizes", [
    ((6, 5), (5, 7), (((1,), (0,)), ((), ())), (1, 6, 5, 7)),
    ((6, 5), (6, 7), (((0,), (0,)), ((), ())), (1, 5, 6, 7)),
    ((2, 6, 3, 4), (2, 5, 3, 4), (((3,), (3,)), ((0, 2), (0, 2))), (6, 6, 4, 5)),
    ((2, 3, 4, 5), (2, 5, 3, 6), (((3,), (1,)), ((0, 1), (0, 2))), (6, 4, 5, 6)),
])
def test_a_product_as_a_plain_matmul_has_its_flops(lhs_shape, rhs_shape, numbers, sizes):
  dot = matmul_floor.Dot(lhs_shape, rhs_shape, "float32", numbers, "float32")
  assert dot.sizes() == sizes
  expected = jax.lax.dot_general(jnp.ones(lhs_shape), jnp.ones(rhs_shape), numbers)
  assert dot.flops == 2 * expected.size * sizes[2]


def test_floor_times_every_product_in_both_libraries():
  dots = collections.Counter({matmul_floor.Dot((64, 32), (64, 16), "float32", (((0,), (0,)), ((), ())), "float32"): 3})
  (row,) = matmul_floor.floor(dots, repeats=2, with_torch=True)
  assert row["count"] == 3 and row["GFLOP"] == pytest.approx(3 * 2 * 64 * 32 * 16 / 1e9)
  assert 0 < row["best s"] == min(row["XLA s"], row["XLA plain s"], row["torch plain s"])
