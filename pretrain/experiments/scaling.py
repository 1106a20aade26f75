"""How big a model for a compute budget? IsoFLOP profiles of a ladder of causal LMs under muP, each budget reached
by a cooldown branch of one warmup-stable-decay run per model, and the scaling laws fitted the way Hoffmann et al.
2022 (Approaches 2 and 3) and Besiroglu et al. 2024 fit them.

  pretrain experiment scaling [--ladder=32x2,64x2,96x2,128x2,192x2,256x2] [--budgets=2e12,4e12,8e12,1.6e13]
      [--seeds=0,1,2] [--cooldown=0.2] [--warmup_steps=20] [--tokens_per_parameter=0.25,30]
      [--learning_rate=1e-2] [--base_width=64] [--head_dim=32] [--batch_size=16] [--seq_len=128] [--evals=10]
      [--resamples=200] [--plan] [--out=docs/scaling] [--out_dir=runs/scaling] [--config.KEY=VALUE ...]

Each rung D x L of --ladder is a decoder-only model of d_model D and L layers (heads of --head_dim, SwiGLU of
3 x D; the quickstart's recipe otherwise: configs/quickstart.py, or --config, with --config.KEY=VALUE overrides)
under muP (model.parameterization=mup, base width --base_width) at the peak rate --learning_rate for every width:
docs/mup.md measured the decoder-only optimum, 1e-2, still from width 64 to 256 with base width 64. Every run
reads batches of --batch_size x --seq_len tokens of the CLM objective (for a seed the same batches in the same
order) and is evaluated on the whole validation split, the same rows at every budget.

A budget of C model FLOPs (counted as `pretrain bench` counts them: pretrain/experiments/budgets.py) is, for a
rung, round(C / its FLOPs per step) steps, which spend C to within half a step; their last --cooldown share
decays. Per rung and seed, one wsd run (schedule wsd, warm-up --warmup_steps, 1-sqrt decay) trains to the largest
budget and keeps the checkpoints where the smaller budgets' decays start; each smaller budget is a `pretrain
cooldown` branch from there. A rung trains for a budget only where its tokens per parameter (D / N) lie within
--tokens_per_parameter, as Hoffmann et al. trained each budget's sizes around its optimum, and where the stable
phase is at least twice the warm-up. Layout: OUT_DIR/DxL/stable/seed=S (a `pretrain sweep` over the seeds) and
OUT_DIR/DxL/C=BUDGET/seed=S (the branches); a rerun reads finished runs back and resumes an interrupted one.
--plan prints the runs and their steps without training.

Fits (pretrain/experiments/isoflop.py, parametric_fit.py): per seed, a parabola of the final loss in ln N per budget
and its minimum N_opt(C), then N_opt ~ C^a (D_opt = C / (6 N_opt) ~ C^(1 - a)), the interval over the seeds'
exponents; and L(N, D) = E + A / N^alpha + B / D^beta on every run (Huber loss, delta 1e-3, on log L; L-BFGS from
Hoffmann et al.'s grid of starts), the intervals from --resamples bootstrap refits over the runs. N counts the
parameters a token multiplies (all but the input embedding), as the FLOPs do. Count-based n-gram models of the
same text give reference rows. Writes OUT.png (IsoFLOP profiles, the frontier, the learning curves) and OUT.md.

Time: the defaults train 10,838 steps per seed (--plan lists them): 38 minutes for the three seeds on 2 AMD EPYC
cores (2026-11-29, with the runs' start-ups, evaluations and the fits), more on a busier machine.
"""

import argparse
import os
import re
import shlex
import time


from pretrain import cli
from pretrain import run as run_lib
from pretrain.config import POSITIVE, Valid
from pretrain.downstream import stats
from pretrain.experiments import branches, budgets as budgets_lib, isoflop, runs, scaling_report, sweep
from pretrain.system.errors import UserError, exit_on_user_error

# 2 layers, as docs/mup.md measured the rate's transfer (muP covers width, not depth); 32x2 lies below muP's base
# width 64, where its rule scales the other way (not measured there).
DEFAULT_LADDER = "32x2,64x2,96x2,128x2,192x2,256x2"
DEFAULT_BUDGETS = "2e12,4e12,8e12,1.6e13"
# Tokens per parameter a size trains at. In a pilot at 1e12 FLOPs (one seed, warm-up 5) the loss rose with the size
# from 64x2 (D / N 1.1: 5.02) to 96x2 (0.4: 5.30), 128x2 (0.2: 5.60), 192x2 (6.16) and 256x2 (6.37), so the optimum
# lies above 1 there; Chinchilla's is about 20. Sizes far outside cost steps (above) or sit far down the profile's
# slope (below).
DEFAULT_WINDOW = "0.25,30"


def parse_ladder(text: str) -> list[tuple[int, int]]:
  rungs = []
  for item in text.split(","):
    match = re.fullmatch(r"\s*(\d+)x(\d+)\s*", item)
    if not match or int(match[1]) < 1 or int(match[2]) < 1:
      raise UserError(f"--ladder item {item!r} is not D_MODELxLAYERS, e.g. --ladder=64x2,128x2,256x2")
    rungs.append((int(match[1]), int(match[2])))
  if len(set(rungs)) != len(rungs):
    raise UserError(f"--ladder={text!r} names a size twice")
  return rungs


def window(text: str) -> tuple[float, float]:
  """An argparse type: 'LOW,HIGH', 0 <= LOW < HIGH."""
  try:
    low, high = (float(v) for v in text.split(","))
  except ValueError:
    raise argparse.ArgumentTypeError(f"{text!r} is not LOW,HIGH (e.g. 0.25,30)") from None
  if not 0 <= low < high:
    raise argparse.ArgumentTypeError(f"give 0 <= LOW < HIGH, not {text!r}")
  return low, high


def parse_budgets(text: str) -> list[float]:
  return runs.numbers(text, "--budgets", lambda v: v > 0, "positive FLOP counts, e.g. 2e12,4e12,8e12")


def heads(d_model: int, head_dim: int) -> tuple[int, int]:
  """(heads, head_dim) of a rung: heads of `head_dim` channels (the width, if narrower)."""
  head_dim = min(head_dim, d_model)
  return max(1, d_model // head_dim), head_dim


def common_flags(args) -> list[str]:
  """The config overrides of every run, before the user's (which may change them: --config.train.eval_batches, say):
  the objective, the batch, evaluation on the whole validation split, muP at the transferred rate, the wsd
  schedule's warm-up and decay."""
  return ["--config.data.objective=clm", f"--config.data.seq_len={args.seq_len}", "--config.data.eval_objectives=()",
          f"--config.train.batch_size={args.batch_size}", "--config.train.eval_batches=100000",
          "--config.train.keep_checkpoints=1", "--config.sample.num=0",
          "--config.model.parameterization=mup", f"--config.model.mup_base_width={args.base_width}",
          f"--config.optimizer.learning_rate={args.learning_rate}", "--config.optimizer.schedule=wsd",
          "--config.optimizer.decay_shape=1-sqrt", f"--config.optimizer.warmup_steps={args.warmup_steps}"]


def rung_flags(d_model: int, num_layers: int, args) -> list[str]:
  """A rung's model shape: heads of --head_dim, SwiGLU of 3 x d_model."""
  count, head_dim = heads(d_model, args.head_dim)
  return runs.model_flags(d_model, num_layers, head_dim, count)


def parent_flags(plan: budgets_lib.Plan, evals: int) -> list[str]:
  """The wsd run's: the largest budget's steps and decay, the branches' starting checkpoints kept."""
  steps = plan.parent.steps
  every = max(1, steps // evals)
  return [f"--config.train.steps={steps}", f"--config.optimizer.decay_steps={plan.parent.decay}",
          runs.keep_steps_flag(plan.keep_steps),
          f"--config.train.eval_every={every}", f"--config.train.checkpoint_every={max(1, steps // 10)}",
          *([f"--config.train.log_every={every}"] if every < 10 else [])]


def branch_flags(branch: budgets_lib.Branch) -> list[str]:
  """A branch evaluates at its end (and where a multiple of its decay falls before); checkpoints as it decays."""
  return [f"--config.train.eval_every={branch.decay}", f"--config.train.checkpoint_every={max(1, branch.decay // 4)}"]


def config(flags: list[str]):
  return cli.parse_command_line(argparse.ArgumentParser(add_help=False), flags)[1]


def rungs_and_plans(rungs, budgets, user: list[str], args) -> list[dict]:
  """Per rung: its name, flags, model (FLOPs, N) and plan, checked before anything trains."""
  found = []
  for d, layers in rungs:
    flags = [*common_flags(args), *user, *rung_flags(d, layers, args)]
    cfg = config(flags)
    model = budgets_lib.model(run_lib.Run.build_with_data(cfg))
    plan = budgets_lib.plan(budgets, model, args.cooldown, args.warmup_steps, args.tokens_per_parameter)
    found.append({"size": f"{d}x{layers}", "d_model": d, "layers": layers,
                  "heads": "{} x {}".format(*heads(d, args.head_dim)), "flags": flags,
                  "model": model, "plan": plan, "end_lr_ratio": cfg.optimizer.end_lr_ratio})
  return found


def record(measured: dict, rung: dict, branch: budgets_lib.Branch, epoch: int) -> dict:
  """A run's figures for the fits and the report."""
  model = rung["model"]
  tokens = branch.steps * model.tokens_per_step
  return {"size": rung["size"], "seed": measured["seed"], "budget": branch.budget, "steps": branch.steps,
          "decay": branch.decay, "flops": branch.flops, "tokens": tokens, "epochs": tokens / epoch, "n": model.n,
          "loss": measured["loss"], "bits_per_byte": measured["final_eval"]["bits_per_byte"],
          "initial_loss": measured["initial_loss"], "initial_bits_per_byte": measured["initial_bits_per_byte"],
          "curve": measured["curve"], "tokens_per_second": measured["tokens_per_second"]}


def train_rung(rung: dict, seeds: list[int], args) -> tuple[list[dict], list[str]]:
  """Every run of a rung (the wsd run per seed, then its branches): their records, and the commands."""
  plan, base = rung["plan"], os.path.join(args.out_dir, rung["size"])
  measured, sweep_argv = sweep.seeded(os.path.join(base, "stable"), [*rung["flags"], *parent_flags(plan, args.evals)],
                                      seeds)
  epoch = rung["epoch"]
  records = [record(m, rung, plan.parent, epoch) for m in measured]
  commands = [shlex.join(["pretrain", "sweep", *sweep_argv])]
  for branch in plan.branches:
    for seed in seeds:
      parent = os.path.join(base, "stable", f"seed={seed}")
      out = os.path.join(base, f"C={branch.budget:g}", f"seed={seed}")
      found = branches.cooldown(parent, branch.start, branch.decay, out, branch_flags(branch))
      records.append(record({**found, "seed": seed}, rung, branch, epoch))
      if seed == seeds[0] and len(commands) == 1:
        commands.append(branches.command(parent, branch.start, branch.decay, out, branch_flags(branch)))
  return records, commands


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain experiment scaling") -> int:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--ladder", default=DEFAULT_LADDER, help="comma-separated D_MODELxLAYERS sizes")
  parser.add_argument("--budgets", default=DEFAULT_BUDGETS, help="comma-separated compute budgets, model FLOPs")
  parser.add_argument("--seeds", default="0,1,2", help="pre-training seeds of every run")
  parser.add_argument("--cooldown", type=cli.number(Valid(lambda v: 0 < v < 1, "a share in (0, 1)")), default=0.2,
                      help="the decay's share of each run's steps")
  parser.add_argument("--warmup_steps", type=cli.at_least(0), default=20, help="warm-up of every run")
  parser.add_argument("--tokens_per_parameter", type=window, default=DEFAULT_WINDOW,
                      help="LOW,HIGH: a size trains for a budget only where its tokens per parameter lie between")
  parser.add_argument("--learning_rate", type=cli.number(POSITIVE), default=1e-2, help="peak rate of every width (muP)")
  parser.add_argument("--base_width", type=cli.at_least(1), default=64, help="muP's base width (model."
                                                                            "mup_base_width)")
  parser.add_argument("--head_dim", type=cli.at_least(1), default=32, help="dimension of each attention head")
  parser.add_argument("--batch_size", type=cli.at_least(1), default=16, help="rows per step")
  parser.add_argument("--seq_len", type=cli.at_least(2), default=128, help="token positions per row")
  parser.add_argument("--evals", type=cli.at_least(1), default=10, help="validation points of each wsd run")
  parser.add_argument("--resamples", type=cli.at_least(0), default=200, help="bootstrap refits of L(N, D)")
  parser.add_argument("--plan", action="store_true", help="print the runs and their steps; train nothing")
  parser.add_argument("--out", default="docs/scaling", help="writes OUT.png and OUT.md")
  parser.add_argument("--out_dir", default="runs/scaling", help="the runs' workdirs, OUT_DIR/DxL/...")
  args, _ = cli.parse_command_line(parser, argv)
  rungs, budgets, seeds = parse_ladder(args.ladder), parse_budgets(args.budgets), runs.seeds(args.seeds)
  user = sweep.config_flags(argv)
  load = runs.machine()
  ladder = rungs_and_plans(rungs, budgets, user, args)
  epoch = runs.train_tokens(config(ladder[0]["flags"]))
  for rung in ladder:
    rung["epoch"] = epoch
  print(scaling_report.plan_table(ladder, budgets, epoch), flush=True)
  steps = sum(r["plan"].steps for r in ladder)
  print(f"{len(ladder)} sizes x {len(budgets)} budgets x {len(seeds)} seeds: {steps:,} steps per seed, "
        f"{steps * len(seeds):,} in all; {load}", flush=True)
  if args.plan:
    return 0
  reference, _ = runs.count_references(config(ladder[0]["flags"]))
  records, commands, start = [], [], time.perf_counter()
  for i, rung in enumerate(ladder, 1):
    found, made = train_rung(rung, seeds, args)
    records += found
    commands += made
    for budget in budgets:
      losses = [r["loss"] for r in found if r["budget"] == budget]
      if losses:
        print(f"[{i}/{len(ladder)}] {rung['size']:<7} C = {budget:.3g}: val loss {stats.text(losses)}", flush=True)
  wall = time.perf_counter() - start
  profiles = isoflop.fit(records)
  law = scaling_report.try_parametric(records, args.resamples)
  scaling_report.write(args, argv, load, ladder, budgets, records, profiles, law, reference, commands, epoch,
                       wall)
  return 0
