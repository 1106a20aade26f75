"""The statistics of every experiment and sweep: the pre-training run is the unit of replication.

A run (one pre-training seed) gives one value per measure. Seeds inside a run (a probe's, a fine-tuning's)
measure the evaluation's own noise, not the pre-training's: they are averaged within the run first
(`run_values`), never pooled with other runs' as if each were a pre-training. Then:

- a setting's figure is the mean over its runs with its 95% interval (Student's t, n - 1 degrees of freedom);
- a run against its own initial parameters is a paired comparison: each run minus its initial model, the
  interval on those differences (`paired`);
- runs against a fixed figure (a published one, a count model's) are a one-sample t-test: the figure's own
  spread is not known, so it counts as exact (`one_sample`);
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
from scipy import integrate, optimize, stats

ALPHA = 0.05
POWER = 0.8  # Of the smallest difference a comparison could have found (Difference.detectable).
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
  the runs behind it and the test ('paired': n pairs; 'Welch': n = runs of A + runs of B); `se` and `df`, the
  standard error and degrees of freedom of the t-test (nan where there is no interval)."""
  mean: float
  half: float
  p: float
  n: int
  test: str
  se: float = float("nan")
  df: float = float("nan")

  def text(self, digits: int = 3) -> str:
    return (f"{self.mean:+.{digits}f}" if math.isnan(self.half)
            else f"{self.mean:+.{digits}f} +- {self.half:.{digits}f}")

  def detectable(self, power: float = POWER) -> float:
    """The smallest true difference this test finds (two-sided, at ALPHA) with probability `power` at the spread
    it saw: se times the noncentrality at which the t-test's power is `power`. A verdict "not shown to differ"
    says no more than that a difference below this size could hide in the spread; nan without an interval."""
    if math.isnan(self.se) or not self.df > 0:
      return float("nan")
    critical = stats.t.ppf(1 - ALPHA / 2, self.df)
    # P(|t| > critical) for t = (z + shift) / sqrt(v / df), over the chi-square v (scipy's noncentral t loses
    # precision at one degree of freedom).
    power_at = lambda shift: integrate.quad(lambda v: stats.chi2.pdf(v, self.df) * (
        stats.norm.sf(critical * math.sqrt(v / self.df) - shift)
        + stats.norm.cdf(-critical * math.sqrt(v / self.df) - shift)), 0, math.inf)[0]
    guess = critical + stats.t.ppf(power, self.df)  # The normal approximation, a little short of it.
    return float(optimize.brentq(lambda shift: power_at(shift) - power, 0.0, 2 * guess) * self.se)

  def not_apart(self, unit: str = "", against: str = "") -> str:
    """The verdict on a difference not found real: 'not shown to differ (at this spread the seeds detect only
    differences of 0.061 nats or more, 80% power)', so that it is not read as 'equal'; or, outside zero by its
    own interval, that only the correction over its family kept it from being real. `against`: what it is not
    shown to differ from."""
    if math.isnan(self.half):
      return "not shown to differ (one run: no interval)"
    if self.half == 0:
      return "no difference: every run gives the same value"
    if abs(self.mean) > self.half:
      return "apart by its own interval, not after Holm's correction: not shown to differ"
    return (f"not shown to differ{' from ' + against if against else ''} (at this spread the seeds detect only differences of {self.detectable():.3f}"
            f"{' ' + unit if unit else ''} or more, {POWER:.0%} power)")


def _t_test(mean: float, se: float, df: float, n: int, test: str) -> Difference:
  if not df > 0 or math.isnan(se):
    return Difference(mean, float("nan"), float("nan"), n, test)
  if se == 0:  # No spread at all: any difference is exact.
    return Difference(mean, 0.0, 0.0 if mean else 1.0, n, test, 0.0, df)
  return Difference(mean, float(stats.t.ppf(0.975, df) * se), float(2 * stats.t.sf(abs(mean) / se, df)), n, test,
                    float(se), float(df))


def paired(a, b) -> Difference:
  """a[i] - b[i] over runs i (e.g. each run's trained value minus its initial parameters')."""
  d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
  if not len(d):
    return Difference(float("nan"), float("nan"), float("nan"), 0, "paired")
  se = d.std(ddof=1) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
  return _t_test(float(d.mean()), se, len(d) - 1, len(d), "paired")


def one_sample(a, value: float) -> Difference:
  """mean(a) - value, where `value` is a fixed figure (a published one): Student's t over the runs a."""
  return dataclasses.replace(paired(a, [value] * len(a)), test="one-sample")


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
