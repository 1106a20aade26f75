"""Means over repeated measurements (seeds) with their 95% intervals, and whether two differ beyond them."""

import math

import numpy as np
from scipy import stats


def interval(values) -> tuple[float, float]:
  """(mean, half-width of its 95% confidence interval by Student's t) of repeated measurements; the half-width is
  nan for a single one."""
  v = np.asarray(values, np.float64)
  if len(v) < 2:
    return float(v.mean()), float("nan")
  return float(v.mean()), float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))


def text(values, digits: int = 3) -> str:
  """'0.654 +- 0.012' (the mean and its 95% interval's half-width), or the value alone for one."""
  mean, half = interval(values)
  return f"{mean:.{digits}f}" if math.isnan(half) else f"{mean:.{digits}f} +- {half:.{digits}f}"


def apart(values: dict, higher_better: bool = True) -> list[str]:
  """'a > b' (or 'a < b' where lower is better) for each pair of named measurement sets that differ beyond their
  noise, the better first, ranked by mean."""
  ranked = sorted(values, key=lambda name: interval(values[name])[0], reverse=higher_better)
  sign = ">" if higher_better else "<"
  return [f"{a} {sign} {b}" for i, a in enumerate(ranked) for b in ranked[i + 1:] if differ(values[a], values[b])]


def differ(a, b) -> bool:
  """Whether two sets of measurements differ beyond their noise: their 95% intervals do not overlap (stricter
  than a two-sample test at 5%)."""
  (mean_a, half_a), (mean_b, half_b) = interval(a), interval(b)
  return abs(mean_a - mean_b) > half_a + half_b
