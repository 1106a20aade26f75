import numpy as np
import pytest

from pretrain.train import losses
from tests import numerics


def _reference(logits, targets, weights, z_loss, eps):
  """KL(q || softmax(logits)) + z_loss * logsumexp^2 per position, in float64."""
  logits = logits.astype(np.float64)
  vocab = logits.shape[-1]
  log_z = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
  log_p = logits - log_z[..., None]
  q = np.full(logits.shape, eps / (vocab - 1))
  np.put_along_axis(q, targets[..., None], 1.0 - eps, axis=-1)
  kl = (q * (np.log(np.where(q > 0, q, 1.0)) - log_p)).sum(-1)
  return ((kl + z_loss * log_z**2) * weights).sum(), ((-np.take_along_axis(log_p, targets[..., None], -1)[..., 0])
                                                       * weights).sum()


@pytest.mark.parametrize("z_loss, eps", [(0.0, 0.0), (1e-4, 0.0), (0.0, 0.1), (1e-2, 0.2)])
def test_matches_the_definition(z_loss, eps):
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(2, 5, 11)).astype(np.float32) * 3
  # About half the targets are the most likely token, so that the count of correct predictions is tested.
  targets = np.where(rng.random((2, 5)) < 0.5, logits.argmax(-1), rng.integers(0, 11, (2, 5)))
  weights = (rng.random((2, 5)) > 0.3).astype(np.int32)
  sums = losses.loss_sums(logits, targets, weights, z_loss, eps)
  expected_loss, expected_xent = _reference(logits, targets, weights, z_loss, eps)
  terms = 11 + 2 * 5  # A softmax over 11 logits, a sum over 2 x 5 positions.
  numerics.assert_close(float(sums["loss"]), expected_loss, terms=terms)
  numerics.assert_close(float(sums["cross_entropy"]), expected_xent, terms=terms)
  assert float(sums["weight"]) == weights.sum()
  # The weighted count of positions whose target has the largest logit (no ties among random logits).
  assert float(sums["correct"]) == ((logits.argmax(-1) == targets) * weights).sum()


def test_perfect_smoothed_prediction_costs_nothing():
  eps, vocab = 0.1, 6
  q = np.full((1, 1, vocab), eps / (vocab - 1))
  q[0, 0, 2] = 1 - eps
  sums = losses.loss_sums(np.log(q).astype(np.float32), np.array([[2]]), np.ones((1, 1)), 0.0, eps)
  assert abs(float(sums["loss"])) < 1e-5
