"""Does a cooldown from a stable run reach a fresh cosine run of the same length? Hägele et al. 2024's finding,
checked on the quickstart's model.

  pretrain experiment cooldown_check [--steps=600] [--seeds=0,1,2] [--fractions=0.1,0.2] [--shapes=1-sqrt,linear]
      [--batch_size=16] [--seq_len=128] [--evals=20] [--out=docs/cooldown] [--out_dir=runs/cooldown]
      [--config.KEY=VALUE ...]

Per seed (train.seed: the initialisation and the data order, the same for every arm of a seed), on the
quickstart's config (configs/quickstart.py, or --config, with --config.KEY=VALUE overrides) for --steps steps T
of --batch_size x --seq_len tokens (the quickstart's batch by default):

- cosine: the quickstart's schedule (warm-up, then a cosine decay to optimizer.end_lr_ratio of the peak at T);
- wsd: the same warm-up and peak held (optimizer.schedule=wsd), its own decay the first of --shapes over the
  first of --fractions of T, keeping its checkpoints at T - round(f x T) for every other fraction f;
- a cooldown branch (pretrain cooldown) for every other fraction and shape: from the wsd run's checkpoint of
  T - round(f x T), decaying over round(f x T) steps to the same end at T.

The wsd run and its branches together cost T + the branches' decays, where a fresh run per arm would cost T each.
Every run evaluates on the whole validation split (the same rows for all), --evals times and at its end; a branch
also where the steps after its start fall on that grid. Each arm against cosine, the fractions against each other
and the shapes against each other are paired over the seeds and Holm-corrected together
(pretrain/downstream/stats.py). The wsd run and cosine are `pretrain sweep`s over the seeds (OUT_DIR/cosine,
OUT_DIR/wsd; a point per seed), the branches in OUT_DIR/wsd_PCT_SHAPE/seed=S: a rerun reads finished runs back
and resumes an interrupted one. Writes OUT.md (the command, machine, date, table, verdicts) and OUT.png
(learning rates, validation curves and final losses).
"""

import argparse
import math
import os
import shlex

import jax.numpy as jnp
import numpy as np

from pretrain import cli
from pretrain import run as run_lib
from pretrain.downstream import stats
from pretrain.experiments import branches, figures, runs, sweep
from pretrain.system.errors import UserError, exit_on_user_error
from pretrain.train import optimizer

COSINE = "cosine"


def arms(steps: int, fractions: list[float], shapes: list[str]) -> list[dict]:
  """The wsd arms: {'name', 'fraction', 'shape', 'decay', 'start'}, the wsd run itself first (the first fraction
  and shape), then its branches."""
  decays = {}
  for fraction in fractions:  # Two fractions of one decay length would be one run, compared with itself.
    decay = max(1, round(fraction * steps))
    if decay in decays:
      raise UserError(f"--fractions {decays[decay]:g} and {fraction:g} both decay over {decay} of the {steps} steps "
                      f"(one run twice); give fractions at least 1/{steps} apart, or more --steps")
    decays[decay] = fraction
  return [{"name": f"wsd_{100 * fraction:g}_{shape}", "fraction": fraction, "shape": shape, "decay": decay,
           "start": steps - decay} for decay, fraction in decays.items() for shape in shapes]


def shared_flags(args) -> list[str]:
  """Every run's budget and evaluation, before the user's flags: the whole validation split (its rows the same for
  every run)."""
  every = max(1, args.steps // args.evals)
  return [f"--config.train.steps={args.steps}", f"--config.train.batch_size={args.batch_size}",
          f"--config.data.seq_len={args.seq_len}", f"--config.train.eval_every={every}",
          f"--config.train.checkpoint_every={max(1, args.steps // 10)}", "--config.train.keep_checkpoints=1",
          "--config.train.eval_batches=100000", "--config.sample.num=0"]


def parent_flags(wsd: list[dict]) -> list[str]:
  """The wsd run's: its own decay the first arm's, and the checkpoints its branches start from kept."""
  keep = sorted({a["start"] for a in wsd[1:]})
  return ["--config.optimizer.schedule=wsd", f"--config.optimizer.decay_steps={wsd[0]['decay']}",
          f"--config.optimizer.decay_shape={wsd[0]['shape']}",
          runs.keep_steps_flag(keep)]


def learning_rates(cfg) -> np.ndarray:
  """The rate of each step of a run's config (what the update that makes step t + 1 uses)."""
  return np.asarray(optimizer.schedule(cfg.optimizer, cfg.train.steps)(jnp.arange(cfg.train.steps + 1)))


def comparisons(results: dict, wsd: list[dict]) -> list[tuple[str, stats.Difference]]:
  """(what, A - B) of final losses paired over seeds: each wsd arm against cosine, then fractions and shapes
  against each other."""
  loss = lambda name: {r["seed"]: r["loss"] for r in results[name]}
  found = [(f"{a['name']} - {COSINE}", stats.compare(loss(a["name"]), loss(COSINE), pair=True)) for a in wsd]
  for a in wsd:
    for b in wsd:
      same_shape = a["shape"] == b["shape"] and a["fraction"] > b["fraction"]
      same_fraction = a["fraction"] == b["fraction"] and wsd.index(a) > wsd.index(b)
      if same_shape or same_fraction:
        found.append((f"{a['name']} - {b['name']}", stats.compare(loss(a["name"]), loss(b["name"]), pair=True)))
  return found


def verdicts(found: list[tuple[str, stats.Difference]]) -> list[str]:
  real = stats.real([d for _, d in found])
  lines = []
  for (what, d), is_real in zip(found, real):
    if what.endswith(f" - {COSINE}"):
      side = "below" if d.mean < 0 else "above"
      if math.isnan(d.half):
        reached = "one seed: no interval."
      elif is_real:
        reached = f"{side} cosine's loss, real after Holm."
      elif abs(d.mean) > d.half:  # Outside the interval of this one comparison, but not after the page's correction.
        reached = f"{side} cosine's loss by its own interval, not after Holm: not shown to differ."
      else:
        reached = d.not_apart("nats", against="cosine's loss") + "."
      lines.append(f"- {what}: {d.text()} nats (paired, n={d.n}, p={d.p:.3f}): {reached}")
    else:
      lines.append(f"- {what}: {d.text()} nats (paired, n={d.n}, p={d.p:.3f})"
                   + (": real after Holm." if is_real else f": {d.not_apart('nats')}."))
  return lines


def table(results: dict, wsd: list[dict], steps: int, reference: dict) -> str:
  rows = ["| arm | schedule | steps trained for it | runs | val loss | minus cosine (paired) | val bits/byte |",
          "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
  cosine = {r["seed"]: r["loss"] for r in results[COSINE]}
  first = results[COSINE]
  rows.append(f"| untrained (step 0) | | 0 | {len(first)} | {stats.text([r['initial_loss'] for r in first])} | | "
              f"{stats.text([r['initial_bits_per_byte'] for r in first])} |")
  described = {COSINE: (f"warm-up, cosine to the end over {steps} steps", steps)}
  for i, a in enumerate(wsd):
    described[a["name"]] = (f"wsd: stable to {a['start']}, {a['shape']} decay over {a['decay']} "
                            f"({a['fraction']:.0%})", steps if i == 0 else a["decay"])
  for name, (schedule, cost) in described.items():
    measured = results[name]
    diff = ("" if name == COSINE else
            stats.compare({r["seed"]: r["loss"] for r in measured}, cosine, pair=True).text())
    rows.append(f"| {name} | {schedule} | {cost} | {len(measured)} | {stats.text([r['loss'] for r in measured])} | "
                f"{diff} | {stats.text([r['final_eval']['bits_per_byte'] for r in measured])} |")
  for name, values in reference.items():
    rows.append(f"| {name} | | | | {values['loss']:.3f} | | {values['bits_per_byte']:.3f} |")
  return "\n".join(rows)


def plot(results: dict, wsd: list[dict], rates: dict, found: list, path: str) -> None:
  with figures.drawn(path, 3, (16, 4.6)) as (lr_ax, curve_ax, final_ax):
    names = [COSINE, *(a["name"] for a in wsd)]
    colors = {name: f"C{i}" for i, name in enumerate(names)}
    for name in names:
      lr_ax.plot(rates[name], color=colors[name], label=name)
    lr_ax.set_xlabel("step")
    lr_ax.set_ylabel("learning rate")
    lr_ax.set_title("schedules", fontsize=9)
    steps = len(rates[COSINE]) - 1
    # Bits per byte is loss x a constant on these rows (the same for every run): a second axis.
    first = results[COSINE][0]
    per_nat = first["final_eval"]["bits_per_byte"] / first["loss"]
    for name in names:
      curves = [dict(r["curve"]) for r in results[name]]
      tokens = sorted(set.intersection(*(set(c) for c in curves)))
      step = [t / results[name][0]["tokens_per_step"] for t in tokens]
      mean = [np.mean([c[t] for c in curves]) for t in tokens]
      shown = [(s, m) for s, m in zip(step, mean) if s >= steps / 2]
      if shown:
        curve_ax.plot(*zip(*shown), "o-", markersize=3, color=colors[name], label=name)
    curve_ax.set_xlabel("step")
    curve_ax.set_ylabel("validation loss (nats per token), mean over seeds")
    curve_ax.set_title("validation curves, second half (mean over seeds)", fontsize=9)
    curve_ax.secondary_yaxis("right", functions=(lambda x: x * per_nat, lambda x: x / per_nat)).set_ylabel(
        "bits per byte")
    against = [(what.split(" - ")[0], d) for what, d in found if what.endswith(f" - {COSINE}")]
    for i, (name, d) in enumerate(against):
      final_ax.errorbar([i], [d.mean], yerr=[0 if math.isnan(d.half) else d.half], fmt="o", capsize=4,
                        color=colors[name])
    final_ax.axhline(0, color=colors[COSINE], lw=1, label=COSINE)
    final_ax.set_xticks(range(len(against)), [name for name, _ in against], rotation=20, fontsize=8)
    final_ax.set_ylabel("final validation loss minus cosine's (nats)")
    final_ax.set_title(f"at step {steps}: paired over seeds, mean and 95% interval", fontsize=9)
    final_ax.legend(fontsize=8)
    for ax in (lr_ax, curve_ax):
      ax.legend(fontsize=8)
    for ax in (lr_ax, curve_ax, final_ax):
      ax.grid(alpha=0.3)


def with_parent_curves(results: dict, wsd: list[dict]) -> None:
  """Each branch's curve preceded by its parent's (the same seed's wsd run) up to the branch's start."""
  parents = {r["seed"]: r for r in results[wsd[0]["name"]]}
  for a in wsd[1:]:
    for r in results[a["name"]]:
      limit = a["start"] * r["tokens_per_step"]
      r["curve"] = [p for p in parents[r["seed"]]["curve"] if p[0] <= limit] + [p for p in r["curve"] if p[0] > limit]


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain experiment cooldown_check") -> int:
  parser = cli.parser_for(prog, __doc__)
  runs.add_flags(parser, "cooldown", "token positions per row", "ARM/seed=S", steps=600)
  parser.set_defaults(evals=20)
  parser.add_argument("--fractions", default="0.1,0.2", help="the cooldowns' shares of T")
  parser.add_argument("--shapes", default="1-sqrt,linear", help="the cooldowns' decay shapes "
                                                               "(optimizer.decay_shape)")
  args, base = cli.parse_command_line(parser, argv)
  seeds = runs.seeds(args.seeds)
  fractions = runs.numbers(args.fractions, "--fractions", lambda f: 0 < f < 1, "shares of T in (0, 1)")
  shapes = runs.names(args.shapes, ("1-sqrt", "linear", "cosine"), "--shapes", "decay shapes")
  wsd = arms(args.steps, fractions, shapes)
  if wsd[-1]["start"] < base.optimizer.warmup_steps:
    raise UserError(f"the longest cooldown, {wsd[-1]['decay']} steps, starts at step {wsd[-1]['start']}, within "
                    f"the warm-up ({base.optimizer.warmup_steps} steps); give more --steps or smaller --fractions")
  user = sweep.config_flags(argv)
  load = runs.machine()
  print(f"{len(seeds)} seeds x (cosine, wsd and {len(wsd) - 1} branches), T = {args.steps} steps; {load}", flush=True)
  reference, _ = runs.count_references(cli.parse_command_line(argparse.ArgumentParser(add_help=False),
                                                              [*shared_flags(args), *user])[1])
  results, rates, commands = {}, {}, []
  for name, flags in ((COSINE, ["--config.optimizer.schedule=cosine"]), (wsd[0]["name"], parent_flags(wsd))):
    results[name], sweep_argv = sweep.seeded(os.path.join(args.out_dir, name), [*shared_flags(args), *user, *flags],
                                             seeds)
    commands.append(shlex.join(["pretrain", "sweep", *sweep_argv]))
    print(f"{name:<16} val loss {stats.text([r['loss'] for r in results[name]])}", flush=True)
  for name in results:
    rates[name] = learning_rates(run_lib.saved_config(os.path.join(args.out_dir, name, f"seed={seeds[0]}")))
  for a in wsd[1:]:
    results[a["name"]] = []
    for seed in seeds:
      parent = os.path.join(args.out_dir, wsd[0]["name"], f"seed={seed}")
      out = os.path.join(args.out_dir, a["name"], f"seed={seed}")
      flags = [f"--config.optimizer.decay_shape={a['shape']}"]
      results[a["name"]].append({**branches.cooldown(parent, a["start"], a["decay"], out, flags), "seed": seed})
      if seed == seeds[0]:
        commands.append(branches.command(parent, a["start"], a["decay"], out, flags))
        rates[a["name"]] = learning_rates(run_lib.saved_config(out))
    print(f"{a['name']:<16} val loss {stats.text([r['loss'] for r in results[a['name']]])}", flush=True)
  with_parent_curves(results, wsd)
  found = comparisons(results, wsd)
  text = "\n".join([table(results, wsd, args.steps, reference), *verdicts(found)])
  runs.write_report(args.out, lambda path: plot(results, wsd, rates, found, path),
                    report(results, wsd, args, argv, load, reference, found, commands), text)
  return 0


def report(results: dict, wsd: list[dict], args, argv: list[str], load: str, reference: dict, found: list,
           commands: list[str]) -> str:
  first = results[COSINE][0]
  tokens = args.steps * first["tokens_per_step"]
  return runs.report("cooldown_check", argv, load, [
      "# Cooldown branches against a fresh cosine run",
      "Hägele et al. 2024 (and MiniCPM, Hu et al. 2024) found that a constant learning rate followed by a short "
      "decay (warmup-stable-decay) matches a cosine schedule of the same length, so that one stable run and a "
      "cooldown branch per length replace a run per length. Checked here at small scale: the quickstart's model "
      f"({first['params']:,} parameters) and optimizer, {args.steps} steps of {first['tokens_per_step']:,} tokens "
      f"({tokens:,} tokens) of the bundled corpus, with the pre-training seeds {args.seeds}: for a seed every arm "
      "starts from the same parameters and reads the same batches. The loss is the validation loss (nats per "
      "token) on the whole validation split, the same rows for every run; a figure 'a +- b' is the mean over the "
      "seeds and its 95% interval, and differences are paired over the seeds.",
      table(results, wsd, args.steps, reference),
      stats.VERDICT, "\n".join(verdicts(found)),
      "'steps trained for it': the wsd run trains the whole length once; each branch adds only its decay. The count "
      "rows are n-gram models of the train split scored on the same validation rows "
      "(pretrain/downstream/ngram.py). The commands, for the first seed where they differ by seed:",
      "\n".join(f"    {c}" for c in commands),
      runs.TIMING_NOTE,
      f"![schedules, curves and final losses]({os.path.basename(args.out)}.png)"])
