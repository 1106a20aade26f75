"""How big a model? Trains a ladder of causal LMs on the same tokens, each size with several seeds, and fits
L(N) = (Nc / N)^alpha + L_inf.

  python tools/scaling.py [--ladder=32x2,64x2,96x2,128x2,128x4,192x4] [--seeds=0,1,2] [--steps=300]
      [--batch_size=16] [--seq_len=128] [--head_dim=32] [--out=docs/scaling] [--out_dir=runs/scaling]
      [--config.KEY=VALUE ...]

Each rung D x L of the ladder is a decoder-only model of d_model D and L layers (heads of --head_dim, SwiGLU of
3 x D, the quickstart's recipe otherwise: configs/quickstart.py, or --config, plus --config.KEY=VALUE
overrides), trained with the CLM objective for --steps steps of --batch_size x --seq_len tokens: every
size of a seed sees the same batches in the same order, with the same optimizer and schedule. Each rung is one
`pretrain sweep` over train.seed in OUT_DIR/DxL (its points OUT_DIR/DxL/seed=S): an interrupted ladder rerun
continues, and finished points are read back.

N is the non-embedding parameter count (Kaplan et al. 2020): all parameters but the input embedding and
the output layer. The final validation loss (nats per token), the mean over the seeds, against N is fitted by
`fit_power_law`: least squares on log L over (log Nc, alpha, L_inf) with alpha in (0, 10] and
0 <= L_inf <= min(loss). Each seed's ladder is fitted too: the spread of alpha and L_inf over the seeds is the
fit's interval (the run is the unit). At a fixed token budget L_inf includes the data-limited term (Hoffmann et
al.'s B / D^b): it is not the entropy of the text. A leave-one-out refit shows how much the fit rests on single
sizes. Count-based n-gram models of the same text (pretrain/downstream/ngram.py) give reference rows. Writes
OUT.png (log-log: points, intervals and fit; and the validation curves) and OUT.md (the command, machine, date, a
table of the runs and the fit), and prints the table.
"""

import argparse
import math
import os
import re
import warnings

import numpy as np
from scipy import optimize

from pretrain import cli
from pretrain.downstream import stats
from pretrain.experiments import runs, sweep
from pretrain.system.errors import UserError, exit_on_user_error

# Two layers or more: a 1-layer model falls off the trend of deeper ones (Kaplan et al. 2020, figure 6); with a
# 32x1 rung in place of 32x2 the fit was a straight line in log-log: L_inf at its bound 0, alpha 0.045, Nc 6e20.
DEFAULT_LADDER = "32x2,64x2,96x2,128x2,128x4,192x4"
_MAX_EXPONENT = 700.0  # exp() of more overflows float64.


def _power_law_log(log_n, log_nc, alpha, l_inf):
  """log L of L(N) = (Nc / N)^alpha + L_inf, taking log N and log Nc."""
  return np.log(np.exp(np.minimum(alpha * (log_nc - log_n), _MAX_EXPONENT)) + l_inf)


def fit_power_law(n, loss) -> tuple[float, float, float]:
  """Fits L(N) = (Nc / N)^alpha + L_inf to points (n, loss); returns (nc, alpha, l_inf).

  Least squares on log L (every point counts by its relative error) over (log Nc, alpha, L_inf), with
  alpha in (0, 10] and 0 <= L_inf <= min(loss), started from the best of a grid of L_inf, for each of which
  log(L - L_inf) is a straight line in log N. Raises ValueError for fewer than 3 distinct sizes (3
  parameters), non-positive or non-finite values, or losses that do not fall with N.
  """
  n, loss = np.asarray(n, np.float64), np.asarray(loss, np.float64)
  if n.ndim != 1 or n.shape != loss.shape:
    raise ValueError(f"fit_power_law needs two equally long lists, got shapes {n.shape} and {loss.shape}")
  if len(np.unique(n)) < 3:
    raise ValueError(f"fit_power_law needs points at 3 or more distinct sizes to fit its 3 parameters (Nc, alpha, "
                     f"L_inf); got {len(np.unique(n))}")
  if not (np.all(np.isfinite(n)) and np.all(np.isfinite(loss)) and np.all(n > 0) and np.all(loss > 0)):
    raise ValueError(f"fit_power_law needs positive finite sizes and losses, got n={n.tolist()}, loss={loss.tolist()}")
  log_n, log_loss, floor = np.log(n), np.log(loss), loss.min()
  start, best = None, np.inf
  for l_inf in np.linspace(0.0, floor, 400, endpoint=False):
    slope, intercept = np.polyfit(log_n, np.log(loss - l_inf), 1)  # log(L - L_inf) = alpha log Nc - alpha log N
    if slope >= 0:
      continue
    guess = (intercept / -slope, -slope, l_inf)
    error = np.sum((_power_law_log(log_n, *guess) - log_loss) ** 2)
    if error < best:
      start, best = guess, error
  if start is None:
    raise ValueError(f"the loss does not fall with N (n={n.tolist()}, loss={loss.tolist()}): no power law with "
                     "alpha > 0 fits")
  alpha_max = 10.0
  start = (start[0], min(start[1], alpha_max), start[2])
  lower = (log_n.min() - _MAX_EXPONENT / alpha_max, 1e-6, 0.0)
  upper = (log_n.max() + _MAX_EXPONENT, alpha_max, floor)
  start = tuple(np.clip(start, lower, upper))
  with warnings.catch_warnings():  # With 3 points the covariance, unused here, is undefined.
    warnings.simplefilter("ignore", optimize.OptimizeWarning)
    (log_nc, alpha, l_inf), _ = optimize.curve_fit(_power_law_log, log_n, log_loss, p0=start,
                                                   bounds=(lower, upper), xtol=1e-15, ftol=1e-15, gtol=1e-15,
                                                   max_nfev=20_000)
  return float(math.exp(log_nc)), float(alpha), float(l_inf)


def power_law(n, nc: float, alpha: float, l_inf: float):
  return (nc / np.asarray(n, np.float64)) ** alpha + l_inf


def parse_ladder(text: str) -> list[tuple[int, int]]:
  rungs = []
  for item in text.split(","):
    match = re.fullmatch(r"\s*(\d+)x(\d+)\s*", item)
    if not match or int(match[1]) < 1 or int(match[2]) < 1:
      raise UserError(f"--ladder item {item!r} is not D_MODELxLAYERS, e.g. --ladder=32x2,64x2,128x4")
    rungs.append((int(match[1]), int(match[2])))
  return rungs


def heads(d_model: int, args) -> tuple[int, int]:
  """(heads, head_dim) of a rung: heads of --head_dim (the width, if narrower)."""
  head_dim = min(args.head_dim, d_model)
  return max(1, d_model // head_dim), head_dim


def rung_flags(d_model: int, num_layers: int, args) -> list[str]:
  """The config overrides of one rung's runs: the CLM objective, the budget and the model's shape."""
  count, head_dim = heads(d_model, args)
  return ["--config.data.objective=clm", f"--config.data.seq_len={args.seq_len}", "--config.data.eval_objectives=()",
          *runs.budget_flags(args.steps, args.batch_size, args.evals),
          *runs.model_flags(d_model, num_layers, head_dim, count)]


def _mean_loss(rung: list[dict]) -> float:
  return float(np.mean([r["loss"] for r in rung]))


def try_fit(results: list[dict]):
  """(nc, alpha, l_inf) or the reason there is no fit; `results` one dict per size with 'non_embedding_params'
  and 'loss'."""
  try:
    return fit_power_law([r["non_embedding_params"] for r in results], [r["loss"] for r in results])
  except (ValueError, RuntimeError) as e:  # RuntimeError: curve_fit did not converge.
    return str(e)


def fit_notes(fit, results: list[dict]) -> list[str]:
  """Plain statements about the fit, including the ways it can be nonsense."""
  if isinstance(fit, str):
    return [f"No fit: {fit}."]
  nc, alpha, l_inf = fit
  losses = np.array([r["loss"] for r in results])
  residuals = losses - power_law([r["non_embedding_params"] for r in results], *fit)
  notes = [f"Fit: L(N) = (Nc / N)^alpha + L_inf with Nc = {nc:.3g}, alpha = {alpha:.3f}, L_inf = {l_inf:.3f} "
           f"nats per token; residuals (measured - fitted) {', '.join(f'{x:+.3f}' for x in residuals)}, "
           f"RMS {np.sqrt(np.mean(residuals ** 2)):.3f}."]
  if len(results) >= 4:  # How much the fit rests on single points.
    refits = [try_fit(results[:i] + results[i + 1:]) for i in range(len(results))]
    refits = [f for f in refits if not isinstance(f, str)]
    if refits:
      alphas, floors = [f[1] for f in refits], [f[2] for f in refits]
      notes.append(f"Leaving out one size at a time ({len(refits)} refits): alpha {min(alphas):.3f} to "
                   f"{max(alphas):.3f}, L_inf {min(floors):.2f} to {max(floors):.2f}.")
  if len(results) == 3:
    notes.append("Three sizes for three parameters: the curve passes through every point, so the residuals say "
                 "nothing about how well a power law describes the data.")
  if l_inf <= 1e-6:
    notes.append("L_inf is at its lower bound 0: the points do not show the loss levelling off.")
  if l_inf >= losses.min() - 1e-6:
    notes.append("L_inf is at its upper bound, the smallest loss: the largest models gain nothing.")
  if alpha >= 10 - 1e-6:
    notes.append("alpha is at its upper bound 10: the fit is a step, not a power law.")
  return notes


def per_seed_fits(ladder: list[list[dict]]) -> list[tuple[float, float, float]]:
  """The fit of each seed's own ladder (the sizes of one seed)."""
  seeds = [r["seed"] for r in ladder[0]]
  fits = [try_fit([next(r for r in rung if r["seed"] == seed) for rung in ladder]) for seed in seeds]
  return [f for f in fits if not isinstance(f, str)]


def means(ladder: list[list[dict]]) -> list[dict]:
  """A size's runs as one point: its N and the mean final loss over its seeds."""
  return [{"non_embedding_params": rung[0]["non_embedding_params"], "loss": _mean_loss(rung)} for rung in ladder]


def seed_fit_note(fits: list[tuple[float, float, float]], seeds: int) -> str:
  """The spread of the fit over the seeds' own ladders."""
  if len(fits) < 2:
    return f"Fits of single seeds' ladders: {len(fits)} of {seeds} converged, too few for an interval."
  return (f"Each seed's ladder fitted alone ({len(fits)} of {seeds} seeds): alpha "
          f"{stats.text([f[1] for f in fits])}, L_inf {stats.text([f[2] for f in fits], 2)} (mean +- 95% "
          "interval over the seeds).")


def table(ladder: list[list[dict]], fit, reference: dict) -> str:
  lines = ["| d_model x layers | heads x head_dim | N (non-embedding) | parameters | runs | val loss (step 0) "
           "| fitted | residual | val bits/byte | tokens/s |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
  for rung in ladder:
    r = rung[0]
    loss = _mean_loss(rung)
    fitted = None if isinstance(fit, str) else float(power_law(r["non_embedding_params"], *fit))
    lines.append(f"| {r['size']} | {r['heads']} | {r['non_embedding_params']:,} | {r['params']:,} | {len(rung)} | "
                 f"{stats.text([x['loss'] for x in rung])} ({r['initial_loss']:.2f}) | "
                 + ("n/a | n/a" if fitted is None else f"{fitted:.3f} | {loss - fitted:+.3f}")
                 + f" | {stats.text([x['final_eval']['bits_per_byte'] for x in rung])}"
                 + f" | {np.median([x['tokens_per_second'] for x in rung]):,.0f} |")
  for name, values in reference.items():
    lines.append(f"| {name} | | | | | {values['loss']:.3f} | | | {values['bits_per_byte']:.3f} | |")
  return "\n".join(lines)


def plot(ladder: list[list[dict]], fit, path: str) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  import matplotlib.ticker  # pylint: disable=g-import-not-at-top

  fig, (law, curves) = plt.subplots(1, 2, figsize=(13, 4.8))
  n = np.array([rung[0]["non_embedding_params"] for rung in ladder], np.float64)
  found = [stats.interval([r["loss"] for r in rung]) for rung in ladder]
  law.errorbar(n, [m for m, _ in found], yerr=[0 if np.isnan(h) else h for _, h in found], fmt="o", color="C0",
               capsize=3, label="final validation loss (mean, 95% interval over seeds)")
  law.set_xscale("log")
  law.set_yscale("log")
  for rung in ladder:
    law.annotate(rung[0]["size"], (rung[0]["non_embedding_params"], _mean_loss(rung)), textcoords="offset points",
                 xytext=(4, 4), fontsize=8)
  if not isinstance(fit, str):
    nc, alpha, l_inf = fit
    grid = np.geomspace(n.min() / 2, n.max() * 4, 200)
    law.loglog(grid, power_law(grid, *fit), "-", color="C1",
               label=f"fit: (Nc / N)^{alpha:.3f} + {l_inf:.2f}, Nc = {nc:.3g}")
    law.axhline(l_inf, color="C1", linestyle=":", linewidth=1, label="L_inf")
  # Plain numbers on the log-scaled loss axis, not 5 x 10^0.
  law.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%.1f"))
  law.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%.1f"))
  law.set_xlabel("N, non-embedding parameters")
  law.set_ylabel("validation loss (nats per token)")
  law.set_title("final validation loss against model size (log-log)", fontsize=9)
  for rung in ladder:
    r = rung[0]
    curves.plot(*zip(*r["curve"]), "o-", markersize=3,
                label=f"{r['size']} (N = {r['non_embedding_params']:,}), seed {r['seed']}")
  curves.set_xlabel("tokens processed")
  curves.set_ylabel("validation loss (nats per token)")
  curves.set_title("validation curves (CLM), first seed", fontsize=9)
  for ax in (law, curves):
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
  fig.savefig(path, dpi=100, bbox_inches="tight")
  plt.close(fig)


def report(ladder: list[list[dict]], fit, args, argv: list[str], load: str, reference: dict,
           commands: list[str]) -> str:
  tokens = args.steps * args.batch_size * args.seq_len
  points = means(ladder)
  return runs.report("tools/scaling.py", argv, load, [
      "# How big a model? A ladder of causal LMs on the same tokens",
      f"Every size trains on the same {tokens:,} token positions ({args.steps} steps x {args.batch_size} x "
      f"{args.seq_len}, for a seed the same batches in the same order) of the bundled corpus with the CLM "
      "objective and the quickstart's optimizer and schedule (the same learning rate for every size), with the "
      f"pre-training seeds {args.seeds}: the unit is the run, and a figure 'a +- b' is the mean over a size's "
      "runs and the half-width of its 95% interval. N counts all parameters but the input embedding and the "
      "output layer; those vocabulary matrices are most of the parameters of the small models. Every rung has 2 "
      "layers or more: 1-layer models fall off the trend of deeper ones (Kaplan et al. 2020, figure 6); an "
      "earlier default ladder starting at 32x1 made the fit degenerate (L_inf at its bound 0). Each size is one "
      "`pretrain sweep` over the seeds; the first size's command (the others change the model's shape):",
      "    .venv/bin/pretrain sweep " + commands[0],
      table(ladder, fit, reference),
      *fit_notes(fit, points),
      seed_fit_note(per_seed_fits(ladder), len(ladder[0])),
      "The fit is on each size's mean loss; fitted and residual compare that mean with the curve. L_inf is an "
      "extrapolation: compare it with the largest model's loss. At a fixed token budget it includes the "
      "data-limited term of Hoffmann et al.'s L(N, D) = E + A / N^a + B / D^b, so it is not the entropy of the "
      "text, and alpha is not comparable to Kaplan et al.'s 0.076 (models trained to convergence on far more "
      "data). The count rows are n-gram models of the train split in the same vocabulary "
      "(pretrain/downstream/ngram.py: add-one unigram, interpolated Kneser-Ney bigram and trigram) on the same "
      "validation rows.",
      runs.TIMING_NOTE,
      f"![scaling]({os.path.basename(args.out)}.png)"])


@exit_on_user_error
def main(argv: list[str], prog: str = "tools/scaling.py") -> int:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--ladder", default=DEFAULT_LADDER, help="comma-separated D_MODELxLAYERS sizes")
  runs.add_flags(parser, "scaling", "token positions per row", "DxL/seed=S")
  parser.add_argument("--seeds", default="0,1,2", help="pre-training seeds of every size")
  parser.add_argument("--head_dim", type=cli.at_least(1), default=32, help="dimension of each attention head")
  args, base = cli.parse_command_line(parser, argv)
  rungs = parse_ladder(args.ladder)
  seeds = runs.seeds(args.seeds)
  user = sweep.config_flags(argv)
  load = runs.machine()
  print(f"{len(rungs)} sizes x {len(seeds)} seeds, each {args.steps} steps x {args.batch_size} x {args.seq_len} "
        f"tokens; {load}", flush=True)
  reference, _ = runs.count_references(cli.parse_command_line(argparse.ArgumentParser(add_help=False),
                                                              [*user, *rung_flags(*rungs[0], args)])[1])
  ladder, commands = [], []
  for i, (d, layers) in enumerate(rungs, 1):
    size = f"{d}x{layers}"
    rung, sweep_argv = sweep.seeded(os.path.join(args.out_dir, size), [*user, *rung_flags(d, layers, args)],
                                         seeds)
    for r in rung:
      r.update(size=size, heads="{} x {}".format(*heads(d, args)))
    ladder.append(rung)
    commands.append(" ".join(sweep_argv))
    print(f"[{i}/{len(rungs)}] {size:<8} N = {rung[0]['non_embedding_params']:>10,}  val loss "
          f"{stats.text([r['loss'] for r in rung])} (step 0: {rung[0]['initial_loss']:.2f})  "
          f"{np.median([r['tokens_per_second'] for r in rung]):>6,.0f} tokens/s", flush=True)
  del base
  write_outputs(ladder, args, argv, load, reference, commands)
  return 0


def write_outputs(ladder: list[list[dict]], args, argv: list[str], load: str, reference: dict,
                  commands: list[str]) -> None:
  """Fits, then writes OUT.png and OUT.md and prints the table and the fit."""
  fit = try_fit(means(ladder))
  runs.write_report(args.out, lambda path: plot(ladder, fit, path),
                    report(ladder, fit, args, argv, load, reference, commands),
                    "\n".join([table(ladder, fit, reference), *fit_notes(fit, means(ladder)),
                               seed_fit_note(per_seed_fits(ladder), len(ladder[0]))]))
