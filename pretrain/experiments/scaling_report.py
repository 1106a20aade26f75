"""The page of `pretrain experiment scaling`: the plan, the runs' losses, Approaches 2 and 3, what they can tell,
the figures."""

import os

import numpy as np

from pretrain.downstream import stats
from pretrain.experiments import budgets as budgets_lib, figures, isoflop, parametric_fit, runs

# The published figures the page sets ours beside, each from another scale.
CHINCHILLA = ("Hoffmann et al. 2022 (Chinchilla; models of 70M to 16B parameters, IsoFLOP budgets of 6e18 to 3e21 "
              "FLOPs): N_opt and D_opt each about C^0.5 (Approach 2: a = 0.49, b = 0.51), about 20 tokens per "
              "parameter")
BESIROGLU = ("Besiroglu et al. 2024's refit of Chinchilla's Approach 3 (the same scale): E = 1.82, A = 482, B = 2085, "
             "alpha = 0.35, beta = 0.37, so a = beta / (alpha + beta) = 0.51")
# Muennighoff et al. 2023: repeated tokens are worth about as much as new ones up to about 4 epochs.
EPOCHS_LIMIT = 4


def plan_table(ladder: list[dict], budgets: list[float], epoch: int) -> str:
  """Per rung: its sizes, FLOPs per token (the attention's share) and each budget's steps (and epochs)."""
  lines = ["| d_model x layers | heads x head_dim | N (multiplying) | non-embedding | parameters | MFLOP per token "
           "(attention) | " + " | ".join(f"C = {c:.3g}: steps, epochs, D/N" for c in budgets) + " | steps per seed |",
           "| --- | --- | ---: | ---: | ---: | ---: | " + "---: | " * len(budgets) + "---: |"]
  for rung in ladder:
    m, plan = rung["model"], rung["plan"]
    per_token = m.step_flops / m.tokens_per_step
    made = {b.budget: b for b in [plan.parent, *plan.branches]}
    cells = [f"{made[c].steps:,}, {made[c].steps * m.tokens_per_step / epoch:.1f}, "
             f"{budgets_lib.tokens_per_parameter(made[c], m):.2g}" if c in made else f"skipped ({plan.skipped[c]})"
             for c in budgets]
    lines.append(f"| {rung['size']} | {rung['heads']} | {m.n:,.0f} | {m.non_embedding:,} | {m.params:,} | "
                 f"{per_token / 1e6:.2f} ({1 - 6 * m.n / per_token:.0%}) | " + " | ".join(cells)
                 + f" | {plan.steps:,} |")
  return "\n".join(lines)


def try_parametric(records: list[dict], resamples: int):
  """Approach 3 with its bootstrap, or the reason there is none."""
  try:
    return parametric_fit.bootstrap([r["n"] for r in records], [r["tokens"] for r in records],
                                    [r["loss"] for r in records], resamples=resamples)
  except ValueError as e:
    return str(e)


def _cell(values: list[float]) -> str:
  return stats.text(values) if values else "skipped"


def results_table(ladder: list[dict], budgets: list[float], records: list[dict], key: str) -> str:
  """Per rung and budget, the mean final `key` over seeds and its interval; step 0 first."""
  initial = "initial_loss" if key == "loss" else "initial_bits_per_byte"
  lines = ["| d_model x layers | N | step 0 | " + " | ".join(f"C = {c:.3g}" for c in budgets) + " |",
           "| --- | ---: | ---: |" + " ---: |" * len(budgets)]
  for rung in ladder:
    mine = [r for r in records if r["size"] == rung["size"]]
    first = [r[initial] for r in mine if r["budget"] == max(r["budget"] for r in mine)]
    lines.append(f"| {rung['size']} | {rung['model'].n:,.0f} | {_cell(first)} | "
                 + " | ".join(_cell([r[key] for r in mine if r["budget"] == c]) for c in budgets) + " |")
  return "\n".join(lines)


def reference_table(reference: dict) -> str:
  lines = ["| count model of the train split | val loss | val bits/byte |", "| --- | ---: | ---: |"]
  lines += [f"| {name} | {v['loss']:.3f} | {v['bits_per_byte']:.3f} |" for name, v in reference.items()]
  return "\n".join(lines)


def _millions(values: list[float]) -> str:
  """'2.31M +- 0.06M' over the seeds."""
  mean, half = stats.interval(values) if values else (float("nan"), float("nan"))
  if not values:
    return "none"
  return f"{mean / 1e6:.3g}M" + ("" if np.isnan(half) else f" +- {half / 1e6:.2g}M")


def approach2_table(fit: isoflop.Fit, budgets: list[float]) -> str:
  lines = ["| budget C | sizes | N_opt | D_opt = C / (6 N_opt) | tokens per parameter | minimum within the sizes |",
           "| ---: | ---: | ---: | ---: | ---: | ---: |"]
  for c in budgets:
    found = [p for ps in fit.profiles.values() for p in ps if p.budget == c]
    optima = [p.n_opt for p in found if p.n_opt is not None]
    sizes = max((len(set(p.n)) for p in found), default=0)
    lines.append(f"| {c:.3g} | {sizes} | {_millions(optima)} | {_millions([c / (6 * n) for n in optima])} | "
                 f"{stats.text([isoflop.tokens_per_parameter(c, n) for n in optima], 1) if optima else 'none'} | "
                 f"{sum(p.inside for p in found)} of {len(found)} seeds |")
  return "\n".join(lines)


def approach2_notes(fit: isoflop.Fit, seeds: int) -> list[str]:
  if len(fit.frontiers) < 1:
    return ["No frontier: no seed has a minimum at two budgets or more (each needs 3 sizes or more at a budget "
            "and a parabola that opens upwards)."]
  a = fit.exponents()
  notes = [f"N_opt ~ C^a with a = {fit.exponent_text()} and D_opt ~ C^b with b = 1 - a = "
           f"{stats.text([1 - x for x in a], 2)} (mean +- 95% interval over {len(a)} of {seeds} seeds' own "
           "frontiers, each a least-squares line through that seed's minima in log-log)."]
  found = [p for ps in fit.profiles.values() for p in ps if p.n_opt is not None]
  outside = sum(not p.inside for p in found)
  if outside:
    notes.append(f"{outside} of the {len(found)} minima (budgets x seeds) {'lies' if outside == 1 else 'lie'} "
                 "outside the sizes measured at their budget: extrapolations of the parabola, which the frontier "
                 "then rests on.")
  return notes


def approach3_table(law) -> str:
  lines = ["| parameter | this fit | 95% bootstrap interval | Besiroglu et al. 2024 (Chinchilla's scale) |",
           "| --- | ---: | ---: | ---: |"]
  for name, digits in (("E", 3), ("A", 1), ("B", 1), ("alpha", 3), ("beta", 3), ("n_exponent", 3)):
    low, high = law.interval(name)
    published = parametric_fit.Law(**parametric_fit.PUBLISHED)
    shown = "a = beta / (alpha + beta)" if name == "n_exponent" else name
    lines.append(f"| {shown} | {getattr(law.law, name):.{digits}f} | {low:.{digits}f} to {high:.{digits}f} | "
                 f"{getattr(published, name):.{digits}f} |")
  return "\n".join(lines)


def approach3_notes(law, records: list[dict]) -> list[str]:
  if isinstance(law, str):
    return [f"No parametric fit: {law}."]
  fitted = law.law.loss([r["n"] for r in records], [r["tokens"] for r in records])
  residual = np.log([r["loss"] for r in records]) - np.log(fitted)
  return [f"Fitted on {len(records)} runs; residuals of log L: RMS {np.sqrt(np.mean(residual ** 2)):.4f}, "
          f"largest {np.abs(residual).max():.4f}. Intervals: {len(law.samples)} refits on runs drawn with "
          "replacement (percentiles 2.5 and 97.5), each started from the full fit and the grid's 4 best starts for "
          "its draw. The runs of one size and seed share their stable phase, so they are not independent draws: "
          "the intervals are, if anything, too narrow."]


def limits(ladder: list[dict], budgets: list[float], records: list[dict], base_width: int) -> list[str]:
  """What a fit at this scale can and cannot tell, with this run's own figures."""
  below = [r["size"] for r in ladder if r["d_model"] < base_width]
  outside = [r["size"] for r in ladder if r["d_model"] > 256]  # docs/mup.md's widest.
  depths = {r["layers"] for r in ladder}
  n = [r["model"].n for r in ladder]
  decades = np.log10(max(budgets) / min(budgets))
  share = max(1 - r["model"].non_embedding / r["model"].n for r in ladder)
  repeated = [r for r in records if r["epochs"] > EPOCHS_LIMIT]
  worst = max(records, key=lambda r: r["epochs"])
  return [
      f"- It can tell, for this corpus, vocabulary and recipe, which of these sizes is best at each budget, how "
      f"that choice moves over a {max(budgets) / min(budgets):.0f}x range of compute, and whether the optimum's "
      "tokens per parameter is near the 20 of Chinchilla's scale or far from it.",
      f"- It cannot tell the exponents at scale: the sizes span {max(n) / min(n):.1f}x in N and the budgets "
      f"{max(budgets) / min(budgets):.0f}x in C ({decades:.1f} decades; Chinchilla's IsoFLOP budgets spanned 2.7), "
      "and an exponent fitted over so short a range moves with the curvature of the profiles and the noise of each "
      f"minimum. The published figures on this page come from models {70e6 / max(n):,.0f} to {16e9 / max(n):,.0f} "
      "times larger than the largest here: they are there to compare against, not to check.",
      f"- The output layer counts in N (up to {share:.0%} of a rung's N here is vocabulary matrix), as it does in "
      "the FLOPs; Kaplan et al. 2020 counted neither vocabulary matrix, which at small sizes alone moves the fitted "
      "exponents (Pearce and Song 2024, Porian et al. 2024).",
      f"- The data repeats: the train split is the corpus's, and {len(repeated)} of {len(records)} runs read it more "
      f"than {EPOCHS_LIMIT} times (most: {worst['size']} at C = {worst['budget']:.3g}, {worst['epochs']:.1f} epochs). "
      "Muennighoff et al. 2023 found repeated tokens worth about as much as new ones up to about 4 epochs and less "
      "after; the small models' large budgets are the most repeated, so their losses are worse than fresh data's "
      "would be, which moves N_opt towards larger models and D here counts tokens read, not distinct tokens.",
      "- E is the loss the fit's form extrapolates to at infinite N and D on this validation split; it is not the "
      "entropy of English, and over so short a range of each axis E, A and alpha (B and beta) trade against each "
      "other: the intervals say how loosely each is pinned.",
      "- Every width trains at one rate, transferred under muP from the base width (docs/mup.md: from width 64 to "
      "256 with 2 layers, in runs of 150 steps of a cosine schedule, the fitted optimum moved by 2^(0.27 +- 0.24), "
      "within the seeds' spread after Holm: no evidence that it moves, not evidence that it holds)"
      + (f"; {', '.join(below)} lie below the base width, where muP's rule runs the other way, unmeasured here"
         if below else "")
      + (f"; {', '.join(outside)} lie beyond the widths measured" if outside else "")
      + ("; the depths differ, and muP transfers across width, not depth" if len(depths) > 1 else "")
      + ". Longer runs tend to prefer lower rates, and docs/mup.md found the muP models at this size worse than "
      "standard ones at their own best rates, so every rung may sit a little above its best loss; one batch size "
      "for every budget, and the wsd cooldowns stand in for fresh cosine runs (docs/cooldown.md, at the "
      "quickstart's size and 600 steps: a 20% 1-sqrt cooldown is not shown to differ from a fresh cosine run's loss "
      "after Holm, its mean below it, and beats a 10% one).",
  ]


def plot(ladder: list[dict], budgets: list[float], records: list[dict], fit: isoflop.Fit, law, path: str) -> None:
  import matplotlib.ticker  # pylint: disable=g-import-not-at-top  (matplotlib: only when drawing)
  with figures.drawn(path, 3, (18, 5.2)) as (iso_ax, frontier_ax, curve_ax):
    cmap = figures.colormap("viridis")
    color = lambda i, count: cmap(0.85 * i / max(count - 1, 1))  # Not viridis's pale yellow end.
    per_nat = records[0]["bits_per_byte"] / records[0]["loss"]  # The same validation rows: bits/byte = loss x this.
    in_bits = lambda ax: ax.secondary_yaxis("right", functions=(lambda x: x * per_nat, lambda x: x / per_nat)
                                           ).set_ylabel("bits per byte")
    for i, c in enumerate(budgets):
      points = []
      for rung in ladder:
        losses = [r["loss"] for r in records if r["size"] == rung["size"] and r["budget"] == c]
        if losses:
          points.append((rung["model"].n, *stats.interval(losses)))
      if not points:
        continue
      n, mean, half = (np.array(x) for x in zip(*points))
      iso_ax.errorbar(n, mean, yerr=np.nan_to_num(half), fmt="o", capsize=3, color=color(i, len(budgets)),
                      label=f"C = {c:.3g} FLOPs")
      shape = isoflop.profile(c, n, mean)  # The parabola of the seeds' mean, for the eye; the numbers are per seed.
      if shape.coefficients is not None:
        grid = np.geomspace(n.min() / 1.3, n.max() * 1.3, 100)
        iso_ax.plot(grid, shape.loss_at(grid), "-", lw=1, color=color(i, len(budgets)))
        if shape.n_opt is not None and shape.inside:
          iso_ax.plot([shape.n_opt], [shape.loss_at(shape.n_opt)], "*", ms=12, color=color(i, len(budgets)),
                      markeredgecolor="black")
    iso_ax.set_xscale("log")
    iso_ax.set_xlabel("N, parameters a token multiplies")
    iso_ax.set_ylabel("final validation loss (nats per token)")
    in_bits(iso_ax)
    iso_ax.set_title("IsoFLOP profiles: mean and 95% interval over seeds, parabola in ln N, * its minimum", fontsize=9)
    iso_ax.legend(fontsize=8)
    _frontier(frontier_ax, fit, law, budgets)
    for i, rung in enumerate(ladder):
      step_flops = rung["model"].step_flops / rung["model"].tokens_per_step
      stable = next(r for r in records if r["size"] == rung["size"] and r["budget"] == max(
          x["budget"] for x in records if x["size"] == rung["size"]))
      curve_ax.plot([t * step_flops for t, _ in stable["curve"][1:]], [l for _, l in stable["curve"][1:]], "-",
                    color=color(i, len(ladder)), label=f"{rung['size']}: wsd run (seed {stable['seed']})")
      ends = {}
      for r in records:
        if r["size"] == rung["size"]:
          ends.setdefault(r["flops"], []).append(r["loss"])
      curve_ax.plot(list(ends), [np.mean(v) for v in ends.values()], "o", color=color(i, len(ladder)))
    curve_ax.set_xscale("log")
    curve_ax.set_xlabel("model FLOPs")
    curve_ax.set_ylabel("validation loss (nats per token)")
    in_bits(curve_ax)
    curve_ax.set_title("the wsd runs' curves; o: the ends of the cooldowns (mean over seeds)", fontsize=9)
    curve_ax.legend(fontsize=8)
    for ax in (iso_ax, frontier_ax, curve_ax):
      ax.grid(alpha=0.3, which="both")
      # Labels at 1, 2 and 5 x each power of ten, as 2e5 (matplotlib's own labels of every minor tick overlap).
      ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
      ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:.0e}".replace("e+0", "e")
                                                                   .replace("e+", "e")))
      ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def _frontier(ax, fit: isoflop.Fit, law, budgets: list[float]) -> None:
  """N_opt and D_opt against C, log-log: each seed's minima, the mean line, Approach 3's and published slopes."""
  grid = np.geomspace(min(budgets) / 1.5, max(budgets) * 1.5, 50)
  for what, color, value in (("N_opt", "C0", lambda c, n: n), ("D_opt", "C1", lambda c, n: c / (6 * n))):
    for seed, profiles in fit.profiles.items():
      found = [(p.budget, value(p.budget, p.n_opt)) for p in profiles if p.n_opt is not None]
      if found:
        ax.plot(*zip(*found), "o", ms=4, color=color, alpha=0.6,
                label=f"{what}: each seed's minima" if seed == min(fit.profiles) else None)
    if fit.frontiers:
      a, k = np.mean(fit.exponents()), np.mean([f.intercept for f in fit.frontiers.values()])
      line = np.exp(k) * grid ** a
      ax.plot(grid, value(grid, line), "-", color=color,
              label=f"{what} ~ C^{a if what == 'N_opt' else 1 - a:.2f} (Approach 2, mean over seeds)")
      middle = grid[len(grid) // 2]
      anchor = value(middle, np.exp(k) * middle ** a)
      ax.plot(grid, anchor * (grid / middle) ** 0.5, ":", color=color, lw=1,
              label="slope 0.5 through ours: Chinchilla's, at 6e18-3e21 FLOPs" if what == "N_opt" else None)
    if not isinstance(law, str):
      ax.plot(grid, value(grid, law.law.n_opt(grid)), "--", color=color, lw=1,
              label=f"{what} of Approach 3's L(N, D)")
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlabel("compute budget C (model FLOPs)")
  ax.set_ylabel("N_opt (parameters), D_opt (tokens)")
  ax.set_title("the compute-optimal frontier", fontsize=9)
  if ax.get_legend_handles_labels()[0]:
    ax.legend(fontsize=7)
  else:
    ax.text(0.5, 0.5, "no minimum at two budgets: no frontier", ha="center", transform=ax.transAxes)


def write(args, argv: list[str], load: str, ladder: list[dict], budgets: list[float], records: list[dict],
          fit: isoflop.Fit, law, reference: dict, commands: list[str], epoch: int, wall: float) -> None:
  seeds = len({r["seed"] for r in records})
  speed = {rung["size"]: np.median([r["tokens_per_second"] for r in records if r["size"] == rung["size"]])
           for rung in ladder}
  tables = [results_table(ladder, budgets, records, "loss"), approach2_table(fit, budgets),
            *approach2_notes(fit, seeds), *([approach3_table(law)] if not isinstance(law, str) else []),
            *approach3_notes(law, records)]
  first = ladder[0]["model"]
  text = runs.report("scaling", argv, load, [
      "# How big a model for a compute budget? IsoFLOP profiles and L(N, D)",
      f"{len(ladder)} decoder-only sizes (d_model x layers: {args.ladder}; heads of {args.head_dim} channels, "
      f"SwiGLU of 3 x d_model) under muP (model.parameterization=mup, base width {args.base_width}), each at the "
      f"peak learning rate {args.learning_rate:g}: the rate transferred from the base width, where docs/mup.md "
      "measured the decoder-only optimum at 1e-2 and saw it hold still from width 64 to 256 under muP. Every run "
      f"reads batches of {args.batch_size} x {args.seq_len} tokens ({first.tokens_per_step:,}) of the bundled "
      f"corpus's train split ({epoch:,} tokens: an epoch) with the CLM objective, warm-up {args.warmup_steps} "
      f"steps, and is scored on the whole validation split, the same rows at every size and budget, in nats per "
      f"token and bits per byte. Seeds {args.seeds}: a seed fixes the initialisation and the order of the batches.",
      f"Compute counts model FLOPs as `pretrain bench` does: 6 per parameter per token it multiplies (N: all "
      "parameters but the input embedding, which gathers) plus 12 x layers x heads x head_dim per query-key pair "
      "(full attention, not causally halved); the table gives each size's FLOPs per token and the attention's "
      "share. A budget C is round(C / FLOPs per step) steps, within half a step of C; the last "
      f"{args.cooldown:.0%} of them decay (1-sqrt, to {ladder[0]['end_lr_ratio']:g} x the peak). Per size and seed one "
      "warmup-stable-decay run trains to the largest budget, its own decay that budget's, and every smaller budget "
      "is a cooldown branch from its stable phase (`pretrain cooldown`), so a budget costs its decay, not a run. As "
      "Hoffmann et al. trained each budget's sizes around its optimum, a size trains for a budget only where its "
      f"tokens per parameter D / N lie between {args.tokens_per_parameter[0]:g} and "
      f"{args.tokens_per_parameter[1]:g} (and its stable phase is at least twice the warm-up); the table gives each "
      "size's steps, epochs of the train split and D / N per budget.",
      plan_table(ladder, budgets, epoch),
      "## Final validation loss",
      "Mean over the seeds and its 95% interval (nats per token); step 0 is the untrained model.",
      results_table(ladder, budgets, records, "loss"),
      "The same in bits per byte:",
      results_table(ladder, budgets, records, "bits_per_byte"),
      "Count-based models of the train split in the same vocabulary (pretrain/downstream/ngram.py) on the same "
      "validation rows:",
      reference_table(reference),
      "## Approach 2: IsoFLOP profiles",
      "Per seed and budget, a parabola of the final loss in ln N through the sizes trained at that budget and its "
      "minimum N_opt; per seed, a line through (ln C, ln N_opt). Figures are means over the seeds with their 95% "
      "intervals.",
      approach2_table(fit, budgets), *approach2_notes(fit, seeds),
      "D_opt = C / (6 N_opt) as Hoffmann et al. write it; the attention's share of each size's FLOPs (the first "
      "table) buys no parameters, so the tokens a budget reads at N_opt are fewer by about that share.",
      f"Published, from another scale: {CHINCHILLA}.",
      "## Approach 3: L(N, D) = E + A / N^alpha + B / D^beta",
      "Fitted to every run's final loss (N as above, D the tokens the run read) by minimising the Huber loss "
      f"(delta {parametric_fit.DELTA:g}) of log L, with L-BFGS from each of Hoffmann et al.'s "
      f"{len(parametric_fit.GRID):,} starts; a = beta / (alpha + beta) is the exponent of N_opt it implies.",
      *([approach3_table(law)] if not isinstance(law, str) else []), *approach3_notes(law, records),
      f"Published, from another scale: {BESIROGLU}.",
      "## What a fit at this scale can and cannot tell",
      "\n".join(limits(ladder, budgets, records, args.base_width)),
      "## Runs and time",
      f"Wall time of this command: {wall / 60:.0f} min (finished runs read back count nothing). tokens/s per size "
      "(median over its runs): " + ", ".join(f"{size} {v:,.0f}" for size, v in speed.items()) + ". The commands of "
      "the first size (the others change the model's shape and steps):",
      "\n".join(f"    {c}" for c in commands[:2]),
      runs.TIMING_NOTE,
      f"![IsoFLOP profiles, frontier and learning curves]({os.path.basename(args.out)}.png)"])
  runs.write_report(args.out, lambda path: plot(ladder, budgets, records, fit, law, path), text, "\n\n".join(tables))
