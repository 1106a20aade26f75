"""The scaling tool's arithmetic and fits (`pretrain experiment scaling`): budgets as steps, FLOPs' N, and
Approaches 2 and 3
recovering a known L(N, D) from losses drawn around it."""

import numpy as np
import pytest

from pretrain.downstream import stats
from pretrain.experiments import budgets, isoflop, parametric_fit
from pretrain.system.errors import UserError

# Besiroglu et al. 2024's refit of Chinchilla: a = beta / (alpha + beta) = 0.513.
TRUE = parametric_fit.Law(**parametric_fit.PUBLISHED)
BUDGETS = np.array([1e18, 2e18, 4e18, 8e18])
# Seven sizes from a quarter of the smallest budget's optimum to four times the largest's: every profile's minimum
# lies inside, as a ladder chosen for the budgets would have it.
LADDER = np.geomspace(TRUE.n_opt(BUDGETS[0]) / 4, TRUE.n_opt(BUDGETS[-1]) * 4, 7)


def _runs(seeds: int, noise: float, seed: int = 0) -> list[dict]:
  """Every size at every budget (C = 6 N D), each seed's losses the law's times a lognormal factor."""
  rng = np.random.default_rng(seed)
  return [{"seed": s, "budget": c, "n": n, "tokens": c / (6 * n),
           "loss": float(TRUE.loss(n, c / (6 * n)) * np.exp(rng.normal(0, noise)))}
          for s in range(seeds) for c in BUDGETS for n in LADDER]


def test_approach_2_recovers_the_exponent_within_its_interval_over_seeds():
  fit = isoflop.fit(_runs(seeds=4, noise=0.003))
  mean, half = stats.interval(fit.exponents())
  assert len(fit.frontiers) == 4 and 0 < half < 0.05
  assert mean - half <= TRUE.n_exponent <= mean + half
  for c in BUDGETS:  # Each seed's minimum near the law's own.
    assert all(abs(np.log(n / TRUE.n_opt(c))) < 0.15 for n in fit.optima(c))
  assert all(p.inside for ps in fit.profiles.values() for p in ps)
  # Without noise the parabola's own bias is what is left: small against the interval above.
  exact = isoflop.fit(_runs(seeds=1, noise=0.0)).exponents()[0]
  assert abs(exact - TRUE.n_exponent) < 0.01


def test_approach_2_says_where_there_is_no_minimum():
  rising = isoflop.profile(1e18, [1e6, 2e6, 4e6], [3.0, 3.1, 3.3])  # Smallest is best: the minimum lies below.
  assert rising.n_opt is not None and not rising.inside
  assert isoflop.profile(1e18, [1e6, 2e6, 4e6], [3.0, 2.5, 3.0]).inside
  assert isoflop.profile(1e18, [1e6, 2e6, 4e6], [3.0, 3.5, 3.0]).n_opt is None  # Opens downwards.
  assert isoflop.profile(1e18, [1e6, 2e6], [3.0, 2.9]).n_opt is None  # Two sizes: no parabola.
  assert isoflop.frontier([isoflop.profile(1e18, [1e6, 2e6], [3.0, 2.9])]) is None
  assert isoflop.tokens_per_parameter(120 * 1e6 ** 2, 1e6) == pytest.approx(20)


def test_approach_3_recovers_the_law_within_its_bootstrap_intervals():
  # A 95% interval misses one time in twenty: with the draw of seed 0, beta's does (0.3663 to 0.3820).
  runs = _runs(seeds=3, noise=0.003, seed=1)
  starts = parametric_fit.GRID[::149]  # 31 of the 4,500 starts: the test's time.
  found = parametric_fit.bootstrap([r["n"] for r in runs], [r["tokens"] for r in runs], [r["loss"] for r in runs],
                                   resamples=20, refine=1, starts=starts)
  for name in ("alpha", "beta", "E", "n_exponent"):
    low, high = found.interval(name)
    assert low <= getattr(TRUE, name) <= high, (name, low, high)
  assert found.law.alpha == pytest.approx(TRUE.alpha, abs=0.05) and found.law.beta == pytest.approx(TRUE.beta, abs=0.05)
  # Exact losses: the fit is the law.
  n, c = np.meshgrid(LADDER, BUDGETS)
  exact = parametric_fit.fit(n.ravel(), (c / (6 * n)).ravel(), TRUE.loss(n, c / (6 * n)).ravel(), starts=starts)
  assert exact.alpha == pytest.approx(TRUE.alpha, rel=1e-3) and exact.E == pytest.approx(TRUE.E, rel=1e-3)
  with pytest.raises(ValueError, match="5 runs or more"):
    parametric_fit.fit([1e6] * 4, [1e7] * 4, [3.0] * 4)


def test_a_budget_is_its_steps_within_half_a_step_and_the_cooldown_a_fifth():
  for budget, step_flops in ((1e13, 3.7e9), (2.5e12, 1.234e10), (7e11, 9.9e8)):
    b = budgets.branch(budget, step_flops, 0.2)
    assert abs(b.flops - budget) <= step_flops / 2 and b.decay == round(0.2 * b.steps) and b.start + b.decay == b.steps
  model = budgets.Model(step_flops=1e10, tokens_per_step=1000, n=1e5, non_embedding=50_000, params=150_000)
  plan = budgets.plan([4e12, 1e12, 2e12, 1e11, 8e12], model, 0.2, warmup_steps=10, window=(0.5, 5))
  assert (plan.parent.budget, plan.parent.steps, plan.parent.decay) == (4e12, 400, 80)
  assert [b.budget for b in plan.branches] == [1e12, 2e12] and plan.keep_steps == (80, 160)
  # 10 steps: a stable phase shorter than the warm-up; 800 steps: 8 tokens per parameter.
  assert plan.skipped == {1e11: "10 steps: less stable phase than warm-up", 8e12: "8 tokens per parameter"}
  assert plan.steps == 400 + 20 + 40
  with pytest.raises(UserError, match="no budget suits this model .*1e[+]11: 10 steps: less stable phase"):
    budgets.plan([1e11], model, 0.2, warmup_steps=10)
  with pytest.raises(UserError, match="some the same: give budgets further apart"):
    budgets.plan([1e12, 1.001e12], model, 0.2, warmup_steps=1)


def test_n_is_the_flops_parameters_of_6_n_d():
  """flops_per_example = 6 N x tokens + the attention term, N every parameter but the input embedding."""
  from tests.conftest import tiny_run  # pylint: disable=g-import-not-at-top
  run = tiny_run("--config.data.seq_len=64")
  model = budgets.model(run)
  m = run.cfg.model
  attention = 12 * m.num_layers * m.num_heads * m.head_dim * 64 * 64
  assert model.step_flops == run.cfg.train.batch_size * (6 * model.n * 64 + attention)
  # The input embedding is left out, the output layer (as large, untied) is in.
  assert model.params - model.n == model.n - model.non_embedding >= run.vocab_size * m.d_model
  assert model.tokens_per_step == run.cfg.train.batch_size * 64
