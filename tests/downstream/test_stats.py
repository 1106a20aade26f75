"""pretrain/downstream/stats.py: the run is the unit; paired and Welch comparisons; Holm's correction."""

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from pretrain.downstream import stats


def test_pooling_inner_seeds_would_find_a_difference_that_the_runs_do_not_show():
  """Two settings, two pre-training runs each, five probe seeds per run with little spread: the probe seeds are
  not independent pre-trainings, and treating them so declares a difference that two runs per side cannot."""
  rng = np.random.default_rng(0)
  a = [m + rng.normal(0, 0.001, 5) for m in (0.60, 0.66)]
  b = [m + rng.normal(0, 0.001, 5) for m in (0.64, 0.70)]
  pooled = scipy_stats.ttest_ind(np.concatenate(a), np.concatenate(b), equal_var=False)
  assert pooled.pvalue < 0.05  # What pooling would conclude.
  difference = stats.compare(stats.run_values(a), stats.run_values(b))
  assert difference.n == 4 and difference.test == "Welch"
  assert difference.p > 0.05 and abs(difference.mean) < difference.half
  assert stats.apart({"a": stats.run_values(a), "b": stats.run_values(b)}) == []


def test_intervals_and_the_welch_test_match_scipy():
  assert stats.interval([1.0, 2.0, 3.0]) == pytest.approx((2.0, 4.303 * 1.0 / 3 ** 0.5), rel=1e-3)
  assert stats.text([0.5]) == "0.500" and stats.text([0.5, 0.7]).startswith("0.600 +- ")
  a, b = [0.51, 0.55, 0.49, 0.53], [0.60, 0.66, 0.59]
  d = stats.welch(a, b)
  assert d.p == pytest.approx(scipy_stats.ttest_ind(a, b, equal_var=False).pvalue)
  assert d.mean == pytest.approx(np.mean(a) - np.mean(b))
  result = scipy_stats.ttest_ind(a, b, equal_var=False)
  low, high = result.confidence_interval()
  assert (d.mean - d.half, d.mean + d.half) == pytest.approx((low, high))
  assert math.isnan(stats.welch([1.0], [2.0, 3.0]).p)  # One run: no interval, never real.


def test_pairing_removes_what_the_seeds_share():
  """Two settings whose runs move together with the seed (the same start): paired, the difference is clear;
  as independent samples, the seed-to-seed spread hides it."""
  base = {0: 0.50, 1: 0.60, 2: 0.55, 3: 0.65}
  better = {seed: v + 0.02 + 0.001 * seed for seed, v in base.items()}
  assert stats.compare(better, base, pair=True).p < 0.01
  assert stats.compare(better, base).p > 0.05
  assert stats.compare(better, base, pair=True).p == pytest.approx(
      scipy_stats.ttest_rel(list(better.values()), list(base.values())).pvalue)
  assert stats.apart({"better": better, "base": base}, pair=True) == ["better > base"]
  assert stats.apart({"better": better, "base": base}, higher_better=False, pair=True) == ["base < better"]


def test_runs_against_a_fixed_figure_are_a_one_sample_t_test():
  runs = [97.5, 98.2, 97.9]
  d = stats.one_sample(runs, 82.7)
  assert d.test == "one-sample" and d.n == 3 and d.mean == pytest.approx(np.mean(runs) - 82.7)
  assert d.p == pytest.approx(scipy_stats.ttest_1samp(runs, 82.7).pvalue)
  assert d.half == pytest.approx(scipy_stats.t.ppf(0.975, 2) * scipy_stats.sem(runs))


def test_holm_corrects_over_the_family():
  assert stats.holm([0.01, 0.04, 0.03, 0.20]) == [True, False, False, False]
  assert stats.holm([0.001, 0.012, 0.02]) == [True, True, True]
  assert stats.holm([float("nan"), 0.001]) == [False, True]


def test_against_initial_is_paired_per_run():
  trained = {"clm": [0.80, 0.82, 0.79], "mlm": [0.51, 0.49, 0.50]}
  initial = {"clm": [0.50, 0.52, 0.49], "mlm": [0.50, 0.52, 0.49]}
  found = stats.against_initial(trained, initial)
  assert found["clm"][1] and found["clm"][0].mean == pytest.approx(0.30)
  assert not found["mlm"][1]


def test_a_difference_not_shown_says_the_smallest_one_the_seeds_would_find():
  """'Not shown to differ' is not 'equal': the verdict names the difference the test finds 80% of the time at
  the spread it saw; a simulated test with that true difference and that spread finds it that often."""
  d = stats.paired([4.31, 4.33, 4.28], [4.30, 4.31, 4.29])
  assert not d.p < 0.05 and d.mean - d.half < 0 < d.mean + d.half
  size = d.detectable()
  assert size > d.half
  assert d.not_apart("nats") == f"not shown to differ (at this spread the seeds detect only differences of " \
                                f"{size:.3f} nats or more, 80% power)"
  rng = np.random.default_rng(0)
  sd = d.se * math.sqrt(3)  # The spread of one pair's difference.
  found = [stats.paired(size + rng.normal(0, sd, 3), np.zeros(3)).p < 0.05 for _ in range(4000)]
  assert np.mean(found) == pytest.approx(0.8, abs=0.02)
  assert stats.welch([1.0], [2.0, 3.0]).not_apart() == "not shown to differ (one run: no interval)"
  outside = stats.paired([4.35, 4.36, 4.34], [4.30, 4.32, 4.29])  # Apart alone; a family's correction may not.
  assert outside.not_apart().startswith("apart by its own interval, not after Holm's correction")
