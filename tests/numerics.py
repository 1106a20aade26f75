"""Tolerances of floating-point comparisons, derived from the computation instead of tuned on one host.

A float sum of n terms rounds differently in another order (another CPU, thread count or XLA version), and the
two results differ by up to about n x eps(dtype) x the terms' magnitude (Higham, Accuracy and Stability of
Numerical Algorithms, section 4.2). So a comparison names the dtype the computation ran in and `terms`, the summed
lengths of the reductions its values pass through (a dot product's contraction, a softmax's keys, a gradient's
batch x length); the tolerance follows from those and the values' magnitude. Where a float64 reference is cheap
(`exact`), the code under test must be no less accurate than XLA's own op (`assert_as_accurate`), which is a
sharper test.

What the code guarantees bit for bit (a resume, a checkpoint, the same program run twice) stays
np.testing.assert_array_equal.

Another order of summation for the whole suite: PRETRAIN_TEST_XLA_FLAGS replaces the tests' XLA flags
(tests/conftest.py), e.g. "--xla_backend_optimization_level=3 --xla_cpu_multi_thread_eigen=false".
"""

import jax
import jax.numpy as jnp
import numpy as np


def eps(dtype) -> float:
  return float(jnp.finfo(dtype).eps)


def _numbers(x) -> bool:
  return isinstance(x, (list, tuple)) and all(isinstance(v, (int, float)) for v in x)


def _pairs(actual, expected):
  """The leaves of two trees (or two arrays, lists of numbers or numbers), pairwise, as float64 arrays."""
  structure, expected_structure = (jax.tree.structure(t, is_leaf=_numbers) for t in (actual, expected))
  assert structure == expected_structure, f"{structure} against {expected_structure}"
  a, b = jax.tree.leaves(actual, is_leaf=_numbers), jax.tree.leaves(expected, is_leaf=_numbers)
  return [(np.asarray(x, np.float64), np.asarray(y, np.float64)) for x, y in zip(a, b)]


def tolerance(*values, terms: int, dtype=jnp.float32, magnitude: float | None = None) -> float:
  """terms x eps(dtype) x magnitude (by default the largest |value|): how far two orders of the same sums may
  land apart."""
  if magnitude is None:
    magnitude = max(float(np.max(np.abs(np.asarray(v, np.float64)), initial=0.0)) for v in values)
  return terms * eps(dtype) * magnitude


def assert_close(actual, expected, *, terms: int, dtype=jnp.float32, magnitude: float | None = None,
                 err_msg: str = "") -> None:
  """Equal up to the rounding of `terms` summed terms in `dtype`, leaf by leaf of two trees."""
  for a, b in _pairs(actual, expected):
    np.testing.assert_allclose(a, b, rtol=0, atol=tolerance(a, b, terms=terms, dtype=dtype, magnitude=magnitude),
                               err_msg=f"{err_msg} (tolerance from {terms} terms in {jnp.dtype(dtype).name})")


def assert_differs(actual, expected, *, terms: int, dtype=jnp.float32, magnitude: float | None = None,
                   err_msg: str = "") -> None:
  """Apart by more than rounding could explain (assert_close's tolerance), somewhere in the arrays."""
  for a, b in _pairs(actual, expected):
    limit = tolerance(a, b, terms=terms, dtype=dtype, magnitude=magnitude)
    assert np.max(np.abs(a - b), initial=0.0) > limit, f"{err_msg}: equal within rounding ({limit:.3g})"


def exact(f, *args):
  """f(*args) in float64 (jax.enable_x64, float arguments cast): the reference that rounding errors are measured
  from."""
  widen = lambda x: np.asarray(x, np.float64) if jnp.issubdtype(jnp.result_type(x), jnp.floating) else x
  with jax.enable_x64(True):
    return jax.tree.map(np.asarray, f(*jax.tree.map(widen, args)))


def assert_as_accurate(ours, reference, exact_values, *, terms: int, dtype=jnp.float32, err_msg: str = "") -> None:
  """`ours` is no less accurate than `reference` (XLA's own op, in `dtype`), both measured from `exact_values`
  (`exact`), leaf by leaf: its largest error is within twice the reference's (another order of summation is as
  likely to be better as worse), plus the typical rounding of `terms` summed terms, sqrt(terms) x eps x
  magnitude (another algorithm, a blocked softmax, rounds more often; and a reference may happen to round
  exactly)."""
  for (o, e), (r, _) in zip(_pairs(ours, exact_values), _pairs(reference, exact_values)):
    ours_error, reference_error = np.max(np.abs(o - e), initial=0.0), np.max(np.abs(r - e), initial=0.0)
    floor = np.sqrt(terms) * eps(dtype) * np.max(np.abs(e), initial=0.0)
    assert ours_error <= 2 * reference_error + floor, (
        f"{err_msg}: error {ours_error:.3g} against the reference's {reference_error:.3g} (floor {floor:.3g})")


def transformer_terms(config, length: int) -> int:
  """The reductions a transformer's outputs pass through, summed: per layer its norms, the projections into and
  out of attention and the MLP, and attention's sum over `length` keys (a decoder layer of an encoder-decoder
  attends twice: count it double); then the final norm and the output layer. `config` names d_model, num_layers,
  num_heads, head_dim and mlp_dim (num_decoder_layers too, for an encoder-decoder)."""
  per_layer = 3 * config.d_model + length + config.num_heads * config.head_dim + config.mlp_dim
  layers = config.num_layers + 2 * getattr(config, "num_decoder_layers", 0)
  return layers * per_layer + 2 * config.d_model


def gradient_terms(config, batch: int, length: int) -> int:
  """transformer_terms for a parameter's gradient: the forward pass, the backward pass through the same
  reductions, and the sum over the batch's tokens."""
  return 2 * transformer_terms(config, length) + batch * length
