"""IsoFLOP profiles: Hoffmann et al. 2022's Approach 2 to the compute-optimal model size.

For each compute budget C, models of several sizes N are trained for exactly C FLOPs each; a parabola of the final
loss in log N has its minimum at N_opt(C). A straight line through (log C, log N_opt) gives N_opt ~ C^a, and with
C = 6 N D, D_opt = C / (6 N_opt) ~ C^(1 - a). The run is the unit: each seed's runs are fitted alone, and a
figure's interval is over the seeds' fits (pretrain/downstream/stats.py).
"""

import dataclasses
import math

import numpy as np

from pretrain.downstream import stats


@dataclasses.dataclass(frozen=True)
class Profile:
  """One budget's parabola L = curvature x^2 + slope x + level in x = ln N, and its minimum (None without one:
  a parabola open downwards, or too few sizes)."""
  budget: float
  n: tuple[float, ...]
  loss: tuple[float, ...]
  coefficients: tuple[float, float, float] | None
  n_opt: float | None

  @property
  def inside(self) -> bool:
    """Whether the minimum lies within the sizes measured (outside, it is an extrapolation)."""
    return self.n_opt is not None and min(self.n) <= self.n_opt <= max(self.n)

  def loss_at(self, n):
    a, b, c = self.coefficients
    x = np.log(np.asarray(n, np.float64))
    return a * x * x + b * x + c


def profile(budget: float, n, loss) -> Profile:
  """The parabola of `loss` against ln `n` at one budget (3 distinct sizes or more) and its minimum."""
  n, loss = np.asarray(n, np.float64), np.asarray(loss, np.float64)
  if len(np.unique(n)) < 3:
    return Profile(budget, tuple(n), tuple(loss), None, None)
  a, b, c = np.polyfit(np.log(n), loss, 2)
  n_opt = float(math.exp(-b / (2 * a))) if a > 0 else None
  return Profile(budget, tuple(n), tuple(loss), (float(a), float(b), float(c)), n_opt)


@dataclasses.dataclass(frozen=True)
class Frontier:
  """N_opt = exp(intercept) x C^exponent through one seed's profiles with a minimum."""
  exponent: float
  intercept: float


def frontier(profiles: list[Profile]) -> Frontier | None:
  """The line through (ln C, ln N_opt) of the profiles that have a minimum (2 or more), else None."""
  found = [p for p in profiles if p.n_opt is not None]
  if len(found) < 2:
    return None
  budgets, n_opt = np.array([p.budget for p in found]), np.array([p.n_opt for p in found])
  exponent, intercept = np.polyfit(np.log(budgets), np.log(n_opt), 1)
  return Frontier(float(exponent), float(intercept))


def tokens_per_parameter(budget: float, n_opt: float) -> float:
  """D_opt / N_opt with D_opt = C / (6 N_opt)."""
  return budget / (6 * n_opt * n_opt)


@dataclasses.dataclass(frozen=True)
class Fit:
  """Approach 2 over seeds: each seed's profiles and frontier, and the intervals over the seeds' frontiers."""
  profiles: dict  # {seed: [Profile per budget]}
  frontiers: dict  # {seed: Frontier}, the seeds whose profiles give a line

  def exponents(self) -> list[float]:
    return [f.exponent for f in self.frontiers.values()]

  def exponent_text(self, digits: int = 2) -> str:
    """'a +- h' over the seeds' frontiers (the value alone for one)."""
    return stats.text(self.exponents(), digits)

  def optima(self, budget: float) -> list[float]:
    """Each seed's N_opt at `budget`, where its profile has a minimum."""
    return [p.n_opt for ps in self.profiles.values() for p in ps if p.budget == budget and p.n_opt is not None]


def fit(points: list[dict]) -> Fit:
  """Approach 2 on runs {'seed', 'budget', 'n', 'loss'}: per seed a profile per budget and their frontier."""
  profiles, frontiers = {}, {}
  for seed in sorted({p["seed"] for p in points}):
    mine = [p for p in points if p["seed"] == seed]
    profiles[seed] = [profile(b, [p["n"] for p in mine if p["budget"] == b], [p["loss"] for p in mine
                                                                             if p["budget"] == b])
                      for b in sorted({p["budget"] for p in mine})]
    line = frontier(profiles[seed])
    if line is not None:
      frontiers[seed] = line
  return Fit(profiles, frontiers)
