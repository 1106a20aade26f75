"""tests/numerics.py: its tolerances take another order of the same sums and refuse an error a bug would make."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import numerics

TERMS = 4096


def _terms():
  return np.random.default_rng(0).normal(size=(8, TERMS)).astype(np.float32)


def test_another_order_of_the_same_sums_is_close():
  x = _terms()
  forward = np.sum(x, axis=1, dtype=np.float32)  # numpy sums pairwise
  backward = np.cumsum(x[:, ::-1], axis=1, dtype=np.float32)[:, -1]  # one term at a time, from the other end
  assert not np.array_equal(forward, backward)  # The orders do round differently ...
  numerics.assert_close(forward, backward, terms=TERMS)  # ... within the tolerance.


def test_a_dropped_term_or_a_lost_digit_is_not_close():
  x = _terms()
  total = np.sum(x, axis=1, dtype=np.float32)
  with pytest.raises(AssertionError):
    numerics.assert_close(total - x[:, 0], total, terms=TERMS)
  numerics.assert_differs(total - x[:, 0], total, terms=TERMS)
  with pytest.raises(AssertionError):  # Summed in bfloat16: beyond float32's rounding.
    numerics.assert_close(np.sum(x.astype(jnp.bfloat16), axis=1, dtype=jnp.bfloat16), total, terms=TERMS)
  with pytest.raises(AssertionError):
    numerics.assert_differs(total, total, terms=TERMS)


def test_as_accurate_takes_another_order_and_refuses_less_precision():
  x, w = _terms(), np.random.default_rng(1).normal(size=(TERMS, 16)).astype(np.float32)
  matmul = lambda x, w: jnp.dot(x, w)
  exact = numerics.exact(matmul, x, w)
  assert exact.dtype == np.float64
  reference = matmul(x, w)
  by_blocks = sum(jnp.dot(x[:, i:i + 512], w[i:i + 512]) for i in range(0, TERMS, 512))  # another order
  numerics.assert_as_accurate(by_blocks, reference, exact, terms=TERMS)
  with pytest.raises(AssertionError):
    halved = jnp.dot(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
    numerics.assert_as_accurate(halved, reference, exact, terms=TERMS)


def test_trees_compare_leaf_by_leaf_and_say_which():
  a = {"kernel": jnp.ones((2, 2)), "scale": jnp.full((2,), 100.0)}
  numerics.assert_close(a, jax.tree.map(lambda v: v * (1 + 1e-6), a), terms=16)
  with pytest.raises(AssertionError, match="gradient"):
    numerics.assert_close(a, {**a, "kernel": a["kernel"] + 1e-5}, terms=16, err_msg="gradient")  # Not 100's scale.
