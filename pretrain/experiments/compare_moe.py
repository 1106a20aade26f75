"""Dense or mixture of experts? Each family's dense model against its MoE twin of equal active parameters, on the
same tokens.

  pretrain experiment compare_moe [--families=decoder_only,encoder_decoder] [--seeds=0,1,2] [--experts=8] [--top_k=2]
      [--steps=300] [--batch_size=16] [--seq_len=128] [--d_model=128] [--num_layers=2]
      [--out=docs/moe] [--out_dir=runs/moe] [--config.KEY=VALUE ...]

Families (FAMILIES): the decoder-only causal LM (clm) and the T5 encoder-decoder (span corruption, its row of
--seq_len tokens split into inputs and targets as the objective fits them). Per family two models: dense (a
feed-forward layer of 3 x d_model) and MoE (every feed-forward layer --experts experts of width 3 x d_model /
--top_k, each token routed to --top_k of them, dropless): the same active parameters and FLOPs per token but the
router's. Every run: the same steps, batch and rows of the bundled corpus, the same optimizer, schedule and
model otherwise, for each of --seeds (train.seed), in OUT_DIR/FAMILY/MODEL/seedS (pretrain/experiments/arms.py: a
finished run is read back, a stopped one resumed).

Measured: validation loss and bits per byte (the task loss alone: the auxiliary losses are not in them) against
the tokens trained on; tokens/s of each run (the median logged interval); the experts' balance, each MoE layer's
busiest expert's share of the tokens times the experts (1: balanced), over training. A figure 'a +- b' is the
mean and the half-width of its 95% interval over the seeds (pretrain/downstream/stats.py: dense and MoE models
are independent runs, compared by Welch's t).
"""

import os

from pretrain import cli, run as run_lib
from pretrain.downstream import stats
from pretrain.experiments import arms, compare_objectives, figures, runs
from pretrain.system.errors import UserError, exit_on_user_error
from pretrain.train import flops, metrics

FAMILIES = {"decoder_only": "clm", "encoder_decoder": "span_corruption"}
MODELS = ("dense", "moe")


def run_config(base, family: str, model: str, args):
  cfg = base.copy_and_resolve_references()
  c = cfg.data
  c.objective, c.seq_len, c.eval_objectives = FAMILIES[family], args.seq_len, ()
  if runs.splits_rows(run_lib.objective(cfg).family):
    c.inputs_length, c.targets_length = compare_objectives.split_row(c.objective, c, cfg.tokenizer.extra_ids,
                                                                     args.seq_len)
  runs.set_budget(cfg, args.steps, args.batch_size, args.evals)
  runs.set_model(cfg, args.d_model, args.num_layers, args.head_dim)
  m = cfg.model
  m.num_decoder_layers = m.num_layers
  if model == "moe":
    if m.mlp_dim % args.top_k:
      raise UserError(f"--top_k={args.top_k} does not divide the dense width {m.mlp_dim} (3 x --d_model)")
    m.moe_experts, m.moe_top_k, m.moe_mlp_dim, m.moe_every = args.experts, args.top_k, m.mlp_dim // args.top_k, 1
  return cfg


def busiest(workdir: str) -> list[tuple[int, float]]:
  """(step, the mean over MoE layers of the busiest expert's share times the experts) of each evaluation."""
  points = []
  for record in metrics.read(workdir):
    layers = metrics.busiest_expert(record)
    if layers:
      points.append((record["step"], sum(layers.values()) / len(layers)))
  return points


def bits_per_byte_curve(workdir: str, tokens_per_step: int) -> list[tuple[int, float]]:
  return [(r["step"] * tokens_per_step, r["eval/bits_per_byte"]) for r in metrics.read(workdir)
          if "eval/bits_per_byte" in r]


def table(results: dict, reference: dict) -> str:
  rows = ["| family | model | params | active params | GFLOP/step | val loss | val bits/byte | tokens/s | "
          "step time / dense | busiest expert x E, first eval -> last |",
          "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
  for family, by_model in results.items():
    dense_speed = [r["tokens_per_second"] for r in by_model["dense"]]
    for model, seeds in by_model.items():
      r = seeds[0]
      speed = [s["tokens_per_second"] for s in seeds]
      ratio = stats.text([d / s for d, s in zip(dense_speed, speed)], 2) if model == "moe" else "1"
      balance = (f"{stats.text([s['busiest'][0][1] for s in seeds], 2)} -> "
                 f"{stats.text([s['busiest'][-1][1] for s in seeds], 2)}") if r["busiest"] else ""
      rows.append(f"| {family} | {model} | {r['params'] / 1e6:.2f}M | {r['active'] / 1e6:.2f}M | "
                  f"{r['gflop_per_step']:.1f} | {stats.text([s['loss'] for s in seeds])} | "
                  f"{stats.text([s['bpb'][-1][1] for s in seeds])} | {stats.text(speed, 0)} | {ratio} | {balance} |")
  for name, values in reference.items():  # The decoder-only rows' yardstick: counts of the same text.
    rows.append(f"| counts | {name} | | | | {values['loss']:.3f} | {values['bits_per_byte']:.3f} | | | |")
  return "\n".join(rows)


def plot(results: dict, path: str) -> None:
  with figures.drawn(path, 2, (12, 4.5)) as axes:
    for family, by_model in results.items():
      for model, seeds in by_model.items():
        color = figures.seeds(axes[0], {f"{family} {model}": seeds}, lambda r: r["bpb"][1:],
                              style="o-" if model == "moe" else "s--")[f"{family} {model}"]
        if model == "moe":
          for i, r in enumerate(seeds):
            axes[1].plot(*zip(*r["busiest"]), "o-", markersize=3, color=color, alpha=1 if i == 0 else 0.35,
                         label=family if i == 0 else None)
    axes[0].set(xlabel="tokens trained on", ylabel="validation bits per byte",
                title="validation bits per byte (each seed; markers: the first)")
    axes[1].axhline(1.0, color="gray", lw=0.8)
    axes[1].set(xlabel="step", ylabel="busiest expert's share x experts",
                title="expert balance (mean over MoE layers; 1: balanced)")
    for ax in axes:
      ax.grid(alpha=0.3)
      ax.legend(fontsize=8)


def report(results, args, argv, load, reference) -> str:
  verdicts = []
  for family, by_model in results.items():
    finals = {model: [s["bpb"][-1][1] for s in seeds] for model, seeds in by_model.items()}
    apart = stats.apart(finals, higher_better=False)
    both = "dense and MoE " + stats.compare(*finals.values()).not_apart("bits per byte") if len(finals) == 2 else ""
    verdicts.append(f"- {family}: " + (", ".join(apart) or both or "not apart") + ".")
  return runs.report("compare_moe", argv, load, [
      "# Dense or mixture of experts, at equal active parameters and equal tokens",
      f"Every run: {args.steps} steps x {args.batch_size} rows of {args.seq_len} tokens of the bundled corpus, "
      f"{args.d_model} wide with {args.num_layers} layers (the encoder-decoder: {args.num_layers} in each stack), "
      f"AdamW with warmup and cosine decay, seeds {args.seeds}. dense: each feed-forward layer {3 * args.d_model} "
      f"wide. moe: each one {args.experts} experts {3 * args.d_model // args.top_k} wide of which each token takes "
      f"{args.top_k} (dropless; loss.moe_load_balance and loss.moe_z_loss at their defaults). A figure 'a +- b' "
      "is the mean and the half-width of its 95% interval over the seeds.",
      table(results, reference),
      "params: all; active params: those a token multiplies (top_k of each layer's experts), embeddings included. "
      "val loss: the task's cross-entropy on the validation rows (decoder-only: next token; encoder-decoder: the "
      "span-corruption targets), without the auxiliary losses; val bits/byte: the same in bits per UTF-8 byte of "
      "the target tokens' text. tokens/s and step time: measured on this 2-core CPU, where the experts run as "
      f"padded blocks (tools/bench_train.md); {runs.TIMING_NOTE} counts: n-gram models of the train split in the "
      "same vocabulary (pretrain/downstream/ngram.py) on the causal rows, the decoder-only models' reference.",
      f"{stats.VERDICT} the last validation bits per byte, lower is better.",
      "\n".join(verdicts),
      f"![validation bits per byte and expert balance]({os.path.basename(args.out)}.png)"])


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain experiment compare_moe") -> int:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--families", default=",".join(FAMILIES), help=f"comma-separated, of {', '.join(FAMILIES)}")
  parser.add_argument("--experts", type=cli.at_least(2), default=8, help="experts of each MoE layer")
  parser.add_argument("--top_k", type=cli.at_least(1), default=2, help="experts per token")
  runs.add_flags(parser, "moe", "tokens per row (encoder-decoder: inputs + targets)", "FAMILY/MODEL/seedS",
                 model=True, layers_help="layers (of each stack)")
  args, base = cli.parse_command_line(parser, argv)
  names = runs.names(args.families, FAMILIES, "--families", "families")
  if args.top_k > args.experts:
    raise UserError(f"--top_k={args.top_k} is more than --experts={args.experts}")
  seeds = runs.seeds(args.seeds)
  configs = {f"{f}/{m}": run_config(base, f, m, args) for f in names for m in MODELS}  # Arms: FAMILY/MODEL.
  reference, _ = runs.count_references(next(iter(configs.values())))

  def measure(arm, cfg, workdir, wall):
    del arm
    r = arms.standard_figures(cfg, workdir, wall)
    r["active"] = flops.active_parameters(run_lib.Run.build(cfg).abstract_state().params, cfg.model)
    r["busiest"], r["bpb"] = busiest(workdir), bits_per_byte_curve(workdir, r["tokens_per_step"])
    return r

  def said(arm, seed, r):
    family, model = arm.split("/")
    print(f"[seed {seed}] {family:<16} {model:<6} val bits/byte {r['bpb'][-1][1]:.3f}  "
          f"{r['tokens_per_second']:.0f} tokens/s  {r['wall']:.0f} s", flush=True)

  found = arms.each(configs, seeds, args.out_dir, measure, said=said)
  results = {f: {m: found[f"{f}/{m}"] for m in MODELS} for f in names}
  load = arms.machine(found)
  runs.write_report(args.out, lambda path: plot(results, path), report(results, args, argv, load, reference),
                    table(results, reference))
  return 0
