"""The statistics of every experiment and sweep: the pre-training run is the unit of replication.

A run (one pre-training seed) gives one value per measure. Seeds inside a run (a probe's, a fine-tuning's)
measure the evaluation's own noise, not the pre-training's: they are averaged within the run first
(`run_values`), never pooled with other runs' as if each were a pre-training. Then:

- a setting's figure is the mean over its runs with its 95% interval (Student's t, n - 1 degrees of freedom);
- a run against its own initial parameters is a paired comparison: each run minus its initial model, the
  interval on those differences (`paired`);
- two settings compare by the difference of their means: paired over the seeds both ran where the seed gives
  both the same initialisation and data order (a sweep over one setting), else Welch's unequal-variance t
  (`compare`);
- a family of comparisons (every pair of a table's settings, every setting against its initialisation) calls a
  difference real where its two-sided p-value stays below ALPHA after Holm's correction over the family
  (`real`, `apart`), so that ten objectives' 45 pairs do not turn up differences by chance.
"""

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats

ALPHA = 0.05
# How a report says what "real" means.
VERDICT = ("A difference counts as real where its two-sided t-test over the runs (paired over the seeds two settings "
           "share where a seed gives both the same start, else Welch's) survives Holm's correction at 5% over the "
           "comparisons of its list:")


def run_values(inner: Sequence[Sequence[float]]) -> list[float]:
  """One value per run: the mean of each run's inner measurements (its probe or fine-tuning seeds)."""
  return [float(np.mean(v)) for v in inner]


def interval(values) -> tuple[float, float]:
  """(mean, half-width of its 95% confidence interval by Student's t) of per-run values; the half-width is nan
  for a single run."""
  v = np.asarray(values, np.float64)
  if len(v) < 2:
    return float(v.mean()), float("nan")
  return float(v.mean()), float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))


def text(values, digits: int = 3) -> str:
  """'0.654 +- 0.012' (the mean and its 95% interval's half-width), or the value alone for one run."""
  mean, half = interval(values)
  return f"{mean:.{digits}f}" if math.isnan(half) else f"{mean:.{digits}f} +- {half:.{digits}f}"


@dataclasses.dataclass(frozen=True)
class Difference:
  """A - B: the mean difference, the half-width of its 95% interval, the p-value of 'no difference' (two-sided),
  the runs behind it and the test ('paired': n pairs; 'Welch': n = runs of A + runs of B)."""
  mean: float
  half: float
  p: float
  n: int
  test: str

  def text(self, digits: int = 3) -> str:
    return (f"{self.mean:+.{digits}f}" if math.isnan(self.half)
            else f"{self.mean:+.{digits}f} +- {self.half:.{digits}f}")


def _t_test(mean: float, se: float, df: float, n: int, test: str) -> Difference:
  if not df > 0 or math.isnan(se):
    return Difference(mean, float("nan"), float("nan"), n, test)
  if se == 0:  # No spread at all: any difference is exact.
    return Difference(mean, 0.0, 0.0 if mean else 1.0, n, test)
  return Difference(mean, float(stats.t.ppf(0.975, df) * se), float(2 * stats.t.sf(abs(mean) / se, df)), n, test)


def paired(a, b) -> Difference:
  """a[i] - b[i] over runs i (e.g. each run's trained value minus its initial parameters')."""
  d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
  if not len(d):
    return Difference(float("nan"), float("nan"), float("nan"), 0, "paired")
  se = d.std(ddof=1) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
  return _t_test(float(d.mean()), se, len(d) - 1, len(d), "paired")


def welch(a, b) -> Difference:
  """mean(a) - mean(b) of independent runs, by Welch's t (unequal variances, Welch-Satterthwaite degrees)."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  mean = float(a.mean() - b.mean())
  if len(a) < 2 or len(b) < 2:
    return Difference(mean, float("nan"), float("nan"), len(a) + len(b), "Welch")
  va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
  se = math.sqrt(va + vb)
  df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)) if va + vb else len(a) + len(b) - 2
  return _t_test(mean, se, df, len(a) + len(b), "Welch")


def compare(a, b, pair: bool = False) -> Difference:
  """A - B of two settings' per-run values: lists, or {seed: value}. With `pair` and mappings, paired over the
  seeds both hold (the same seed gave both runs their initialisation and data order); otherwise Welch's."""
  if pair and isinstance(a, Mapping) and isinstance(b, Mapping):
    shared = [seed for seed in a if seed in b]
    if len(shared) >= 2:
      return paired([a[s] for s in shared], [b[s] for s in shared])
  values = lambda x: list(x.values()) if isinstance(x, Mapping) else list(x)
  return welch(values(a), values(b))


def holm(p_values: Sequence[float], alpha: float = ALPHA) -> list[bool]:
  """Which of a family of hypotheses Holm's step-down procedure rejects (nan: never)."""
  order = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
  rejected = [False] * len(p_values)
  for rank, (p, i) in enumerate(order):
    if p > alpha / (len(order) - rank):
      break
    rejected[i] = True
  return rejected


def real(differences: Sequence[Difference], alpha: float = ALPHA) -> list[bool]:
  """Which differences of a family are real (Holm-corrected two-sided tests at `alpha`)."""
  return holm([d.p for d in differences], alpha)


def apart(values: Mapping, higher_better: bool = True, pair: bool = False) -> list[str]:
  """'a > b' (or 'a < b' where lower is better) for each pair of settings whose difference is real (every pair
  of `values`, {name: per-run values, a list or {seed: value}}, one family), the better first, ranked by mean."""
  mean = lambda name: interval(list(values[name].values()) if isinstance(values[name], Mapping)
                               else values[name])[0]
  ranked = sorted(values, key=mean, reverse=higher_better)
  pairs = [(a, b) for i, a in enumerate(ranked) for b in ranked[i + 1:]]
  found = real([compare(values[a], values[b], pair) for a, b in pairs])
  sign = ">" if higher_better else "<"
  return [f"{a} {sign} {b}" for (a, b), is_real in zip(pairs, found) if is_real]


def against_initial(trained: Mapping[str, Sequence[float]], initial: Mapping[str, Sequence[float]]
                    ) -> dict[str, tuple[Difference, bool]]:
  """{name: (its runs minus their own initial parameters, paired; whether that is real)}, one family over the
  names."""
  differences = {name: paired(trained[name], initial[name]) for name in trained}
  return dict(zip(differences, zip(differences.values(), real(list(differences.values())))))
