"""Does the best learning rate hold still across widths? Learning-rate sweeps at several widths under the
standard parameterization and under muP (model.parameterization=mup, base width the smallest), for the
decoder-only (CLM) and the encoder-decoder (span corruption) families.

  pretrain experiment mup_transfer [--widths=64,128,256] [--learning_rates=3e-3,1e-2,3e-2] [--seeds=0,1,2]
      [--families=decoder_only,encoder_decoder] [--steps=150] [--batch_size=16] [--seq_len=64]
      [--out=docs/mup_transfer] [--out_dir=runs/mup_transfer] [--config.KEY=VALUE ...]

Every width w is the quickstart's recipe scaled (d_model w, SwiGLU or gated GELU of 3w, heads of 32 channels,
2 layers), trained for --steps steps on the bundled corpus (rows of --seq_len tokens; an encoder-decoder's of
--seq_len inputs and half as many targets); every setting is one `pretrain sweep` over train.seed
(OUT_DIR/FAMILY/PARAMETERIZATION/w=W,lr=LR/seed=S), so a rerun continues. At the base width muP is the standard
model, so those runs are shared. Per seed, the optimum is the vertex of a parabola through log2(loss) against
log2(learning rate) at the best grid point and its neighbours (the grid point itself at an edge); its interval is
over the seeds (the run is the unit). The transferred rate is the base width's best grid rate (mean over seeds);
at each width its loss is compared with that width's own best, paired over seeds.
"""

import math
import os
import shlex

import numpy as np

from pretrain import cli
from pretrain.downstream import stats
from pretrain.experiments import figures, runs, sweep
from pretrain.system.errors import UserError, exit_on_user_error

OBJECTIVE = {"decoder_only": "clm", "encoder_decoder": "span_corruption"}
PARAMETERIZATIONS = ("standard", "mup")


def flags(family: str, parameterization: str, width: int, lr: float, base_width: int, args) -> list[str]:
  # An encoder-decoder row: inputs of seq_len tokens, targets of half that (span corruption's targets are ~30%).
  rows = ([f"--config.data.inputs_length={args.seq_len}", f"--config.data.targets_length={args.seq_len // 2}"]
          if family == "encoder_decoder" else [])
  return [f"--config.data.objective={OBJECTIVE[family]}", f"--config.data.seq_len={args.seq_len}", *rows,
          *runs.budget_flags(args.steps, args.batch_size, args.evals), "--config.train.eval_batches=4",
          *runs.model_flags(width, 2, 32), f"--config.optimizer.learning_rate={lr}",
          f"--config.optimizer.warmup_steps={max(1, args.steps // 10)}",
          f"--config.model.parameterization={parameterization}", f"--config.model.mup_base_width={base_width}"]


def optimum(lrs: list[float], losses: list[float]) -> float:
  """log2 of the best learning rate of one seed's sweep: the vertex of the parabola through the best grid point
  and its neighbours (log2 loss against log2 rate), or the best grid point at an edge or without a minimum."""
  x, y = np.log2(lrs), np.log2(losses)
  i = int(np.argmin(y))
  if i == 0 or i == len(x) - 1:
    return float(x[i])
  a, b, _ = np.polyfit(x[i - 1:i + 2], y[i - 1:i + 2], 2)
  return float(-b / (2 * a)) if a > 0 else float(x[i])


def analyse(results: dict, widths: list[int], lrs: list[float], seeds: list[int]) -> list[dict]:
  """A row per (family, parameterization, width): the optimum's log2 per seed, the transferred rate's loss and
  the width's own best."""
  rows = []
  for (family, parameterization), by_width in results.items():
    base = by_width[widths[0]]
    transferred = min(lrs, key=lambda lr: np.mean([base[lr][s] for s in seeds]))
    for width in widths:
      grid = by_width[width]
      own = min(lrs, key=lambda lr: np.mean([grid[lr][s] for s in seeds]))
      rows.append({
          "family": family, "parameterization": parameterization, "width": width,
          "optima": [optimum(lrs, [grid[lr][s] for lr in lrs]) for s in seeds],
          "best_lr": own, "best": [grid[own][s] for s in seeds], "transferred_lr": transferred,
          "at_transferred": [grid[transferred][s] for s in seeds],
          "losses": {lr: [grid[lr][s] for s in seeds] for lr in lrs}})
  return rows


def table(rows: list[dict], lrs: list[float]) -> str:
  lines = ["| family | parameterization | width | best rate, log2 (95% interval over seeds) | best rate | "
           "best grid rate: loss | loss at the base width's best rate | difference |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
  for r in rows:
    diff = stats.paired(r["at_transferred"], r["best"])
    lines.append(f"| {r['family']} | {r['parameterization']} | {r['width']} | {stats.text(r['optima'], 2)} | "
                 f"{2 ** np.mean(r['optima']):.2g} | {r['best_lr']:g}: {stats.text(r['best'])} | "
                 f"{r['transferred_lr']:g}: {stats.text(r['at_transferred'])} | {diff.mean:+.3f} +- {diff.half:.3f} |")
  return "\n".join(lines)


def shifts(rows: list[dict], widths: list[int], lrs: list[float]) -> list[str]:
  """How far the optimum moves from the smallest to the largest width, per family and parameterization (Welch:
  different widths start from different parameters), Holm-corrected over the list."""
  pairs = []
  for family in sorted({r["family"] for r in rows}):
    for parameterization in PARAMETERIZATIONS:
      first, last = (next(r for r in rows if r["family"] == family and r["parameterization"] == parameterization
                          and r["width"] == w) for w in (widths[0], widths[-1]))
      pairs.append((family, parameterization, stats.compare(last["optima"], first["optima"])))
  moved = stats.real([d for _, _, d in pairs])
  edges = {float(np.log2(lrs[0])), float(np.log2(lrs[-1]))}
  notes = []
  for (family, parameterization, d), real in zip(pairs, moved):
    ends = [r for r in rows if r["family"] == family and r["parameterization"] == parameterization
            and r["width"] in (widths[0], widths[-1])]
    at_edge = any(o in edges for r in ends for o in r["optima"])
    notes.append(f"- {family}, {parameterization}: from width {widths[0]} to {widths[-1]} the optimum's log2 changes "
                 f"by {d.mean:+.2f} +- {d.half:.2f} ({d.test}, n={d.n}, p={d.p:.3f}): "
                 + ("it moves" if real else d.not_apart("in log2"))
                 + ("; but some seeds' best rate is at an edge of the grid, so the optimum is not bracketed."
                    if at_edge else "."))
  return notes


def plot(rows: list[dict], lrs: list[float], path: str) -> None:
  families = sorted({r["family"] for r in rows})
  with figures.drawn(path, 2, (10, 3.6 * len(families)), len(families), dpi=90, squeeze=False, sharex=True) as axes:
    cmap = figures.colormap("viridis")
    widths = sorted({r["width"] for r in rows})
    for i, family in enumerate(families):
      for j, parameterization in enumerate(PARAMETERIZATIONS):
        ax = axes[i][j]
        for k, width in enumerate(widths):
          r = next(r for r in rows if r["family"] == family and r["parameterization"] == parameterization
                   and r["width"] == width)
          means = [stats.interval(r["losses"][lr]) for lr in lrs]
          ax.errorbar(lrs, [m for m, _ in means], yerr=[0 if math.isnan(h) else h for _, h in means], marker="o",
                      ms=3, capsize=2, color=cmap(k / max(len(widths) - 1, 1)), label=f"width {width}")
          ax.axvline(2 ** np.mean(r["optima"]), color=cmap(k / max(len(widths) - 1, 1)), ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_title(f"{family}, {parameterization}", fontsize=10)
        ax.set_xlabel("peak learning rate")
        ax.set_ylabel("final validation loss")
        ax.legend(fontsize=8)


def page(rows: list[dict], widths: list[int], lrs: list[float], seeds: list[int], commands: list[str], args,
         argv: list[str], load: str) -> str:
  """The page in markdown: the table of `rows` (analyse's), the optima's shifts and the sweeps' `commands`."""
  return runs.report("mup_transfer", argv, load, [
      "# Learning-rate transfer across width: standard parameterization and muP",
      f"{len(widths)} widths x {len(lrs)} peak learning rates x {len(seeds)} seeds per family and parameterization, "
      f"each run {args.steps} steps of {args.batch_size} x {args.seq_len} tokens of the bundled corpus (AdamW, "
      f"warm-up {max(1, args.steps // 10)} steps then cosine decay; muP's base width {widths[0]}). The loss is the "
      "final validation loss (nats per target token) of the run's own objective; the untrained models score about "
      "8.3 (uniform over the vocabulary). Whether an optimum moves is a Welch test over the seeds of the smallest "
      "and the largest width, Holm-corrected over the list below.",
      table(rows, lrs), "\n".join(shifts(rows, widths, lrs)),
      "Each width's sweep: `" + "`, `".join(commands[:2]) + "`, ... (one per setting).",
      f"![learning rate against loss per width]({os.path.basename(args.out)}.png)"])


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain experiment mup_transfer") -> int:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--widths", default="64,128,256", help="d_model of each width; the first is muP's base")
  parser.add_argument("--learning_rates", default="3e-3,1e-2,3e-2", help="peak learning rates swept")
  parser.add_argument("--families", default="decoder_only,encoder_decoder")
  runs.add_flags(parser, "mup_transfer", "tokens per row", "FAMILY/PARAMETERIZATION/w=W,lr=LR/seed=S", steps=150)
  parser.set_defaults(seq_len=64)
  args, _ = cli.parse_command_line(parser, argv)
  widths = [int(w) for w in args.widths.split(",")]
  lrs = sorted(float(v) for v in args.learning_rates.split(","))
  if len(widths) < 2 or len(lrs) < 3:
    raise UserError("give two widths or more (--widths) and three learning rates or more (--learning_rates)")
  families = runs.names(args.families, list(OBJECTIVE), "--families", "families")
  seeds = runs.seeds(args.seeds)
  user = sweep.config_flags(argv)
  load = runs.machine()
  results, commands = {}, []
  for family in families:
    for parameterization in PARAMETERIZATIONS:
      for width in widths:
        for lr in lrs:
          # At the base width muP is the standard model: its runs are the standard ones.
          kind = "standard" if width == widths[0] else parameterization
          workdir = os.path.join(args.out_dir, family, kind, f"w={width},lr={lr:g}")
          measured, sweep_argv = sweep.seeded(workdir, [*user, *flags(family, kind, width, lr, widths[0], args)],
                                              seeds)
          if kind == parameterization:
            commands.append(shlex.join(sweep_argv))
          results.setdefault((family, parameterization), {}).setdefault(width, {})[lr] = {
              s: r["loss"] for s, r in zip(seeds, measured)}
          print(f"{family} {parameterization} width {width} lr {lr:g}: loss "
                f"{stats.text([r['loss'] for r in measured])}", flush=True)
  rows = analyse(results, widths, lrs, seeds)
  text = "\n".join([table(rows, lrs), *shifts(rows, widths, lrs)])
  runs.write_report(args.out, lambda path: plot(rows, lrs, path),
                    page(rows, widths, lrs, seeds, commands, args, argv, load), text)
  return 0
