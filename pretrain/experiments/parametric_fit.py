"""L(N, D) = E + A / N^alpha + B / D^beta: Hoffmann et al. 2022's Approach 3, as Besiroglu et al. 2024 refit it.

The parameters minimise the Huber loss (delta 1e-3) between log L(N, D) and the measured log loss, over
(a, b, e, alpha, beta) with A = exp(a), B = exp(b), E = exp(e) (log L = logsumexp(a - alpha ln N, b - beta ln D,
e)), by L-BFGS from every start of Hoffmann et al.'s grid, the best kept. Intervals come from a bootstrap over
the runs: refits on runs drawn with replacement, started from the full fit and the grid's best starts for the
resample. The compute-optimal allocation follows: N_opt ~ C^(beta / (alpha + beta)), D_opt ~ C^(alpha / (alpha +
beta)).
"""

import dataclasses
import itertools

import numpy as np
from scipy import optimize

DELTA = 1e-3
# Hoffmann et al.'s grid of starts (appendix D.2): alpha, beta, e, a, b.
GRID = np.array(list(itertools.product(np.arange(0, 2.01, 0.5), np.arange(0, 2.01, 0.5), np.arange(-1, 1.01, 0.5),
                                       np.arange(0, 25.01, 5), np.arange(0, 25.01, 5))))[:, [3, 4, 2, 0, 1]]
# Besiroglu et al. 2024's refit of Hoffmann et al.'s data (their table 1), for the page's comparison.
PUBLISHED = {"E": 1.82, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}


@dataclasses.dataclass(frozen=True)
class Law:
  E: float
  A: float
  B: float
  alpha: float
  beta: float

  def loss(self, n, d):
    return self.E + self.A / np.asarray(n, np.float64) ** self.alpha + self.B / np.asarray(d, np.float64) ** self.beta

  @property
  def n_exponent(self) -> float:
    """a of N_opt ~ C^a under C = 6 N D."""
    return self.beta / (self.alpha + self.beta)

  def n_opt(self, budget):
    """The N that minimises L(N, C / (6 N)): G (C / 6)^a with G = (alpha A / (beta B))^(1 / (alpha + beta))."""
    g = (self.alpha * self.A / (self.beta * self.B)) ** (1 / (self.alpha + self.beta))
    return g * (np.asarray(budget, np.float64) / 6) ** self.n_exponent


def _objective(theta, log_n, log_d, log_loss):
  """The summed Huber loss of the log-space residuals and its gradient in theta = (a, b, e, alpha, beta)."""
  a, b, e, alpha, beta = theta
  terms = np.stack([a - alpha * log_n, b - beta * log_d, np.full_like(log_n, e)])
  top = terms.max(axis=0)
  w = np.exp(terms - top)
  total = w.sum(axis=0)
  w /= total  # d predicted / d term
  r = top + np.log(total) - log_loss
  small = np.abs(r) <= DELTA
  value = np.where(small, 0.5 * r * r, DELTA * (np.abs(r) - 0.5 * DELTA)).sum()
  dr = np.where(small, r, DELTA * np.sign(r))  # d Huber / d r
  grad = np.array([(dr * w[0]).sum(), (dr * w[1]).sum(), (dr * w[2]).sum(), -(dr * w[0] * log_n).sum(),
                   -(dr * w[1] * log_d).sum()])
  return value, grad


def _minimise(start, data) -> tuple[float, np.ndarray]:
  result = optimize.minimize(_objective, start, args=data, jac=True, method="L-BFGS-B",
                             options={"maxiter": 1000, "ftol": 1e-12, "gtol": 1e-9})
  return float(result.fun), result.x


def _starts_values(starts: np.ndarray, data) -> np.ndarray:
  """The objective at each start, all at once."""
  log_n, log_d, log_loss = data
  a, b, e, alpha, beta = (starts[:, i:i + 1] for i in range(5))
  predicted = np.logaddexp(np.logaddexp(a - alpha * log_n, b - beta * log_d), e)
  r = np.abs(predicted - log_loss)
  return np.where(r <= DELTA, 0.5 * r * r, DELTA * (r - 0.5 * DELTA)).sum(axis=1)


def _best(starts: np.ndarray, data) -> np.ndarray:
  best = min((_minimise(s, data) for s in starts), key=lambda found: found[0])
  return best[1]


def _law(theta) -> Law:
  a, b, e, alpha, beta = (float(x) for x in theta)
  with np.errstate(over="ignore"):  # A degenerate refit's A or B: inf, left out of the intervals.
    return Law(float(np.exp(e)), float(np.exp(a)), float(np.exp(b)), alpha, beta)


def _data(n, d, loss):
  n, d, loss = (np.asarray(x, np.float64) for x in (n, d, loss))
  if not (n.shape == d.shape == loss.shape and n.ndim == 1):
    raise ValueError(f"fit needs three equally long lists, got shapes {n.shape}, {d.shape}, {loss.shape}")
  if len(n) < 5:
    raise ValueError(f"fit needs 5 runs or more for its 5 parameters, got {len(n)}")
  if not (np.all(n > 0) and np.all(d > 0) and np.all(loss > 0) and np.all(np.isfinite(loss))):
    raise ValueError("fit needs positive sizes, tokens and losses")
  return np.log(n), np.log(d), np.log(loss)


def fit(n, d, loss, starts: np.ndarray = GRID) -> Law:
  """The law that fits runs of N parameters trained on D tokens to final losses `loss`: L-BFGS from every start."""
  return _law(_best(starts, _data(n, d, loss)))


@dataclasses.dataclass(frozen=True)
class Bootstrapped:
  law: Law
  samples: list  # [Law] of the resamples

  def interval(self, name: str) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of a parameter (or 'n_exponent') over the resamples (those where it is
    finite: a refit can run A or B off to overflow)."""
    values = [v for v in (getattr(law, name) for law in self.samples) if np.isfinite(v)]
    if not values:
      return float("nan"), float("nan")
    return float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))


def bootstrap(n, d, loss, resamples: int = 200, seed: int = 0, refine: int = 4,
              starts: np.ndarray = GRID) -> Bootstrapped:
  """The fit (from every start) and `resamples` refits on runs drawn with replacement, each from the full fit and
  the `refine` starts best on the resample."""
  data = _data(n, d, loss)
  theta = _best(starts, data)
  rng = np.random.default_rng(seed)
  samples = []
  for _ in range(resamples):
    pick = rng.integers(0, len(data[0]), len(data[0]))
    drawn = tuple(x[pick] for x in data)
    samples.append(_law(_best(np.vstack([theta, starts[np.argsort(_starts_values(starts, drawn))[:refine]]]),
                              drawn)))
  return Bootstrapped(_law(theta), samples)
