"""Which curriculum? The same decoder-only model on the same token budget, trained with CLM, with UL2's
denoisers, with one after the other (data.schedule), and with sequence-length warmup (data.length_schedule).

  pretrain experiment curriculum [--arms=clm,ul2,ul2_then_clm,clm_then_ul2,clm_length_warmup] [--seeds=0,1,2]
      [--switch=0.7] [--ul2r=0.2] [--probe_seeds=5] [--steps=300] [--batch_size=16] [--seq_len=128]
      [--d_model=128] [--num_layers=2] [--out=docs/curriculum] [--out_dir=runs/curriculum] [--config.KEY=VALUE ...]

Arms (ARMS): CLM only; UL2 only (ul2_decoder: UL2's seven denoisers as prefix-LM examples with mode tokens);
UL2, then CLM from --switch of the steps; CLM, then UL2 for the last --ul2r of the steps (UL2R-style); CLM with
sequence-length warmup (rows of seq_len/4 for the first 10% of the steps, seq_len/2 until 20%, the same tokens
per step). Every arm processes the same token positions: steps x batch_size rows of seq_len (a UL2 row is
inputs + targets = seq_len / 2 + seq_len / 2), on the bundled corpus (configs/quickstart.py or --config), each
with --seeds (train.seed: initialisation, data order, noise), in OUT_DIR/ARM/seedS (pretrain/experiments/arms.py:
a finished run is read back, a stopped one resumed).

Measured per run, on the validation split: CLM bits per byte (the causal loss of every arm's model on the same
rows, over the UTF-8 bytes of their text), the UL2 denoising loss (ul2_decoder's examples), the same-document
probe (pretrain/downstream/: a linear probe on frozen features, on the corpus's held-out documents, --probe_seeds
seeds averaged within each run, beside the initial parameters) and wall time. A figure 'a +- b' is the mean and
the half-width of its 95% interval over the runs (pretrain/downstream/stats.py); arms compare paired over the
seeds they share, and a difference counts as real where it survives Holm's correction at 5%.
"""

import os

import numpy as np

from pretrain import cli, run as run_lib
from pretrain.config import OPEN_FRACTION
from pretrain.downstream import stats
from pretrain.downstream import evaluation
from pretrain.experiments import arms, figures, runs
from pretrain.system.errors import UserError, exit_on_user_error
from pretrain.train import metrics

ARMS = ("clm", "ul2", "ul2_then_clm", "clm_then_ul2", "clm_length_warmup")
CLM_BPB, UL2_LOSS, PROBE = "CLM val bits/byte", "UL2 val loss", "same-document probe"


def describe(arm: str, args) -> str:
  """What an arm trains, in words, with its steps."""
  steps, length = args.steps, args.seq_len
  return {"clm": "CLM only", "ul2": "UL2 only",
          "ul2_then_clm": f"UL2, then CLM from step {round(args.switch * steps)}",
          "clm_then_ul2": f"CLM, then UL2 from step {round((1 - args.ul2r) * steps)} (UL2R)",
          "clm_length_warmup": f"CLM, rows of {length // 4} then {length // 2} tokens until steps {steps // 10} and "
                               f"{steps // 5}"}[arm]


def arm_config(base, arm: str, args):
  """The config of one arm: the base config, the shared budget and model, and the arm's objectives."""
  cfg = base.copy_and_resolve_references()
  c, steps = cfg.data, args.steps
  c.seq_len, c.inputs_length, c.targets_length = args.seq_len, args.seq_len // 2, args.seq_len // 2
  c.objective, c.eval_objectives, c.schedule, c.length_schedule = "ul2_decoder", ("clm",), (), ()
  if arm in ("clm", "clm_length_warmup"):
    c.objective, c.eval_objectives = "clm", ("ul2_decoder",)
  if arm == "clm_length_warmup":
    c.length_schedule = ((0, args.seq_len // 4), (steps // 10, args.seq_len // 2), (steps // 5, args.seq_len))
  elif arm == "ul2_then_clm":
    c.eval_objectives = ()  # A schedule's members are evaluated.
    c.schedule = ((0, (("ul2_decoder", 1.0),)), (round(args.switch * steps), (("clm", 1.0),)))
  elif arm == "clm_then_ul2":
    c.eval_objectives = ()
    c.schedule = ((0, (("clm", 1.0),)), (round((1 - args.ul2r) * steps), (("ul2_decoder", 1.0),)))
  runs.set_budget(cfg, steps, args.batch_size, args.evals)
  runs.set_model(cfg, args.d_model, args.num_layers, args.head_dim)
  return cfg


def curves(workdir: str, objective: str, tokens_per_step: int) -> dict[str, list[tuple[int, float]]]:
  """Validation CLM bits per byte and UL2 loss against tokens processed, whichever task the run trained."""
  keys = {CLM_BPB: ("eval/bits_per_byte" if objective == "clm" else "eval/corpus_clm/bits_per_byte"),
          UL2_LOSS: ("eval/loss" if objective == "ul2_decoder" else "eval/corpus_ul2_decoder/loss")}
  records = metrics.read(workdir)
  return {name: [(r["step"] * tokens_per_step, r[key]) for r in records if key in r] for name, key in keys.items()}


def probe(workdir: str, seeds: int) -> dict[str, list[float]]:
  """The same-document probe's accuracies of a finished run ('model') and of its initial parameters ('random
  init')."""
  run, params, _ = run_lib.load(workdir)
  rows = {"model": params, "random init": run.create_state().params}
  return {name: evaluation.measure(run, p, "same_document", seeds)["same_document_probe"] for name, p in rows.items()}


def table(results: dict[str, list[dict]], init: list[float], args, reference: dict) -> str:
  head = (f"| arm | runs | {CLM_BPB} | {UL2_LOSS} | {PROBE} | wall s |\n| --- | ---: | ---: | ---: | ---: | ---: |\n"
          f"| initial parameters | {len(init) or len(next(iter(results.values())))} | "
          f"{stats.text([r['curves'][CLM_BPB][0][1] for r in next(iter(results.values()))])} "
          f"| {stats.text([r['curves'][UL2_LOSS][0][1] for r in next(iter(results.values()))])} | "
          f"{stats.text(init) if init else 'n/a'} | |")
  rows = []
  for arm, seeds in results.items():
    final = {name: [r["curves"][name][-1][1] for r in seeds] for name in (CLM_BPB, UL2_LOSS)}
    accuracies = stats.run_values([r["probe"] for r in seeds if "probe" in r])
    rows.append(f"| {arm}: {describe(arm, args)} | {len(seeds)} | {stats.text(final[CLM_BPB])} | "
                f"{stats.text(final[UL2_LOSS])} | {stats.text(accuracies) if accuracies else 'n/a'} | "
                f"{stats.text([r['wall'] for r in seeds], 0)} |")
  rows += [f"| {name} | | {values['bits_per_byte']:.3f} | | | |" for name, values in reference.items()]
  return "\n".join([head, *rows])


def verdicts(results: dict[str, list[dict]], init: list[float]) -> list[str]:
  """Which arms differ beyond the noise, per measure (lower is better but for the probe): paired over the seeds
  the arms share (a seed gives every arm the same initial parameters and data order), Holm-corrected."""
  lines = []
  for name, higher_better in ((CLM_BPB, False), (UL2_LOSS, False), (PROBE, True)):
    values = {arm: {r["seed"]: (r["curves"][name][-1][1] if name != PROBE else float(np.mean(r["probe"])))
                    for r in seeds if name != PROBE or "probe" in r} for arm, seeds in results.items()}
    values = {arm: v for arm, v in values.items() if v}
    if not values:  # --probe_seeds=0: nothing to compare.
      lines.append(f"- **{name}**: not measured.")
      continue
    apart = stats.apart(values, higher_better, pair=True)
    above = []
    if name == PROBE and init:
      differences = stats.against_initial({arm: list(v.values()) for arm, v in values.items()},
                                          {arm: init for arm in values})
      above = [arm for arm, (d, is_real) in differences.items() if is_real and d.mean > 0]
    lines.append(f"- **{name}** ({'higher' if higher_better else 'lower'} is better): "
                 f"{', '.join(apart) or 'no two arms apart'}"
                 + (f"; above the initial parameters: {', '.join(above) or 'none'}" if name == PROBE else "") + ".")
  return lines


def plot(results: dict[str, list[dict]], path: str, schedules: dict[str, str]) -> None:
  with figures.drawn(path, 2, (14, 4.8)) as axes:
    for ax, name in zip(axes, (CLM_BPB, UL2_LOSS)):
      figures.seeds(ax, results, lambda r, name=name: r["curves"][name], lambda arm, _: f"{arm} ({schedules[arm]})")
      ax.set_title(f"validation {name.split(' val ')[1]} of {name.split(' ')[0]} (each seed; markers: the first)")
      ax.set_xlabel("tokens processed")
      ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)


def report(results, init, args, argv, load, reference) -> str:
  return runs.report("curriculum", argv, load, [
      "# Which curriculum? CLM, UL2 and their orders on one decoder-only model",
      f"Every arm: {args.steps} steps x {args.batch_size} rows x {args.seq_len} token positions (a UL2 row is "
      f"{args.seq_len // 2} + {args.seq_len // 2}), the same model ({args.d_model} wide, {args.num_layers} layers), "
      f"optimizer and schedule, the bundled corpus's train split, seeds {args.seeds} (train.seed). UL2 is "
      "ul2_decoder: UL2's seven denoisers as prefix-LM examples with their mode tokens. A figure 'a +- b' is the "
      "mean and the half-width of its 95% interval over the seeds (the probe's: each run's mean over its probe "
      "seeds, then over the runs).",
      table(results, init, args, reference),
      "The count rows: n-gram models of the train split in the same vocabulary (pretrain/downstream/ngram.py) on "
      "the same validation rows; a model below them has learned more than counts of adjacent tokens.",
      f"{CLM_BPB}: the causal next-token loss of the model on the validation rows, in bits per UTF-8 byte of "
      f"their text. {UL2_LOSS}: the cross-entropy per target token of ul2_decoder's validation examples. "
      f"{PROBE}: a linear probe on the frozen mean hidden state tells whether two 32-token passages of the "
      f"corpus's held-out documents come from one document (chance 0.5; {args.probe_seeds} probe seeds per run). "
      "The initial parameters are the same for every arm of a seed.",
      stats.VERDICT,
      "\n".join(verdicts(results, init)),
      "wall s includes compilation (one per row length), evaluation and the checkpoint, and is noisy on this "
      "shared machine.",
      f"![validation curves]({os.path.basename(args.out)}.png)"])


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain experiment curriculum") -> int:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
  runs.add_flags(parser, "curriculum", "token positions per row", "ARM/seedS", model=True)
  parser.add_argument("--switch", type=cli.number(OPEN_FRACTION), default=0.7, help="ul2_then_clm: the share of steps before CLM")
  parser.add_argument("--ul2r", type=cli.number(OPEN_FRACTION), default=0.2, help="clm_then_ul2: the share of steps of UL2 at the end")
  parser.add_argument("--probe_seeds", type=cli.at_least(0), default=5, help="same-document probe seeds per run (0: no probe)")
  args, base = cli.parse_command_line(parser, argv)
  chosen = runs.names(args.arms, ARMS, "--arms", "arms")
  seeds = runs.seeds(args.seeds)
  if args.seq_len % 8:
    raise UserError(f"--seq_len={args.seq_len}: give a length divisible by 8")
  configs = {arm: arm_config(base, arm, args) for arm in chosen}
  reference, _ = runs.count_references(next(iter(configs.values())))
  print(f"{len(chosen)} arms x {len(seeds)} seeds, runs of {args.steps} steps x {args.batch_size} x {args.seq_len} "
        f"tokens; {runs.machine()}", flush=True)

  def measure(arm, cfg, workdir, wall):
    del arm
    r = arms.standard_figures(cfg, workdir, wall)
    r["curves"] = curves(workdir, cfg.data.objective, r["tokens_per_step"])
    if args.probe_seeds:  # The model's, and its initial parameters' (the same for every arm of a seed).
      r["probe"], r["initial_probe"] = probe(workdir, args.probe_seeds).values()
    return r

  def said(arm, seed, r):
    print(f"[seed {seed}, {chosen.index(arm) + 1}/{len(chosen)}] {arm:<18} CLM bits/byte "
          f"{r['curves'][CLM_BPB][-1][1]:.3f}  UL2 loss {r['curves'][UL2_LOSS][-1][1]:.3f}  probe "
          f"{stats.text(r.get('probe', [float('nan')]))}  {r['wall']:.0f} s", flush=True)

  results = arms.each(configs, seeds, args.out_dir, measure,
                      {arm: {"probe_seeds": args.probe_seeds} for arm in configs}, said=said)
  # One value per seed, from its first arm's run: the mean of the probe's seeds on the initial parameters.
  init = [float(np.mean(r["initial_probe"])) for r in results[chosen[0]] if "initial_probe" in r]
  schedules = {arm: describe(arm, args) for arm in chosen}
  runs.write_report(args.out, lambda path: plot(results, path, schedules),
                    report(results, init, args, argv, arms.machine(results), reference),
                    table(results, init, args, reference))
  return 0
