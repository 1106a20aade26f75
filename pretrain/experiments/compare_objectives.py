"""Which objective? Trains small models per pre-training objective on the same token budget, with several
seeds, and compares them: their own validation losses, and downstream, beside their initial parameters.

  python tools/compare_objectives.py [--objectives=clm,prefix_lm_decoder,span_corruption,ul2,mass,mlm,nsp,sop,electra,
      contrastive] [--seeds=0,1] [--probe_seeds=5] [--finetune_seeds=2] [--finetune_steps=300] [--steps=300]
      [--batch_size=16] [--seq_len=128] [--d_model=128] [--num_layers=2] [--enc_dec_layers=N] [--probe_documents=N]
      [--out=docs/compare_objectives] [--out_dir=runs/compare_objectives] [--config.KEY=VALUE ...]

Every objective trains from scratch on the bundled corpus (configs/quickstart.py, or --config, plus
--config.KEY=VALUE overrides) with each of --seeds (train.seed: initialisation, data order, noise), the same
optimizer and schedule (contrastive adds SimCSE's dropout of 0.1, which its two views need), in its own workdir
OUT_DIR/OBJECTIVE/seedS (an earlier run there is deleted first), in this process: runs do not share state
(two runs of one objective with another in between log identical losses).

Downstream (pretrain/downstream/, `pretrain probe`), each run and its initial parameters: the same-document
probe on the corpus's held-out documents (--probe_seeds seeds each), the package task's linear probe, and the
package task fine-tuned (--finetune_seeds seeds of --finetune_steps steps). Every figure is a mean with its 95%
interval over the runs' seeds (and the probe's or fine-tuning's), and a difference counts as real only where
the two intervals are apart.

Same token budget: every step processes batch_size rows of seq_len token positions, for --steps steps.
A CLM (decoder-only) or encoder-only row (MLM, NSP, SOP, ELECTRA, contrastive) is seq_len tokens; a decoder-only prefix-LM row is
inputs + targets = seq_len; an encoder-decoder row is inputs_length + targets_length = seq_len, split
per objective: span corruption takes the largest inputs_length whose targets still fit (128 -> 104 + 24,
near T5's 512 + 114), UL2 the largest that fits all its denoisers (128 -> 64 + 64, as its X-denoisers at
density 0.5 need targets as long as inputs), prefix LM half and half. So all models process the same
token positions; they do not predict the same number of target tokens (measured and reported), nor read
the same number of corpus tokens. With --enc_dec_layers equal to --num_layers (the default) an
encoder-decoder has about 1.4-2x the parameters of the decoder-only model, but each token still passes
through num_layers layers, so the layers' FLOPs per token match (as in the UL2 paper's compute-matched
comparisons); its output layer runs over the targets only, so with a small model and a 4096-way output
layer it does fewer FLOPs per step (GFLOP/step is reported).

Writes OUT.png (validation loss against tokens processed, one line per objective, and the CLM validation
loss of the decoder-only models) and OUT.md (the command, machine, date and the table, also printed).
Each run's own console output goes to OUT_DIR/OBJECTIVE/train.log.
"""

import os
import statistics

import ml_collections
import numpy as np

from pretrain import cli, objectives, run as run_lib
from pretrain.downstream import stats
from pretrain.errors import UserError, exit_on_user_error
from pretrain.experiments import runs

DEFAULT_OBJECTIVES = "clm,prefix_lm_decoder,span_corruption,ul2,mass,mlm,nsp,sop,electra,contrastive"
# Validation metrics not shown in a column of their own (the loss is; perplexity follows from it).
_OWN_COLUMN = ("loss", "perplexity", "bits_per_byte")


def _fits(name: str, data_cfg, extra_ids: int, inputs: int, targets: int) -> bool:
  """Whether an objective's examples fit feature lengths (inputs, targets), by the objective's own check."""
  data = data_cfg.copy_and_resolve_references()
  data.inputs_length, data.targets_length = inputs, targets
  try:
    objectives.get(name).check(ml_collections.ConfigDict({"data": data, "tokenizer": {"extra_ids": extra_ids}}))
  except UserError:
    return False
  return True


def split_row(name: str, data_cfg, extra_ids: int, row: int) -> tuple[int, int]:
  """(inputs_length, targets_length) summing to `row` for an objective with inputs, as the objective splits a row
  (its row_split): the largest inputs length whose targets fit (span corruption, UL2: least padding, most text),
  or half and half."""
  if objectives.get(name).row_split == "half":
    half = row // 2
    if not _fits(name, data_cfg, extra_ids, half, row - half):
      raise UserError(f"--seq_len={row} is too short for {name}; raise it")
    return half, row - half
  for inputs in range(row - 1, 1, -1):
    if _fits(name, data_cfg, extra_ids, inputs, row - inputs):
      return inputs, row - inputs
  raise UserError(f"no split of a row of --seq_len={row} tokens into inputs + targets fits {name} with "
                  f"{extra_ids} sentinels; raise --seq_len, or --config.tokenizer.extra_ids if spans run out")


def run_config(base, name: str, args):
  """The config of one objective's run: the base config, the shared budget and model, the objective's lengths."""
  cfg = base.copy_and_resolve_references()
  c = cfg.data
  c.objective = name
  family = run_lib.objective(cfg).family
  c.seq_len = args.seq_len
  if runs.splits_rows(family):
    c.inputs_length, c.targets_length = split_row(name, c, cfg.tokenizer.extra_ids, args.seq_len)
  c.eval_objectives = (runs.YARDSTICK,) if family.prefix_lm else ()
  runs.set_budget(cfg, args.steps, args.batch_size, args.evals)
  runs.set_model(cfg, args.d_model, args.num_layers, args.head_dim, args.num_heads, args.mlp_dim)
  m = cfg.model
  if "inputs" in family.row_lengths(family.task_lengths(c)):  # An encoder reads the inputs, a decoder the targets.
    m.num_layers = m.num_decoder_layers = args.enc_dec_layers or args.num_layers
  if name == "contrastive":
    m.dropout = m.dropout or 0.1  # Its two views are two dropout masks (SimCSE's rate).
  return cfg


def _row_text(r: dict, batch: int) -> str:
  row = r["row"]
  if "inputs" in row:
    return f"{batch} x ({row['inputs']} + {row['targets']}) = {r['tokens_per_step']:,}"
  return f"{batch} x {row['targets']} = {r['tokens_per_step']:,}"


# Downstream measures: (key of pretrain.downstream.evaluation.measure, column title).
MEASURES = (("same_document_probe", "same-document probe"), ("package_probe", "package probe"),
            ("package_finetune", "package fine-tuned"))
INIT = "random init"


def downstream(workdir: str, args) -> dict:
  """{'model': {measure: [values]}, 'random init': ...} of a finished run and of its initial parameters."""
  from pretrain.downstream import evaluation  # pylint: disable=g-import-not-at-top
  run, params, _ = run_lib.load(workdir)
  values = {}
  for name, row_params in (("model", params), (INIT, run.create_state().params)):
    same = evaluation.measure(run, row_params, "same_document", args.probe_seeds, max_documents=args.probe_documents)
    packages = evaluation.measure(run, row_params, "packages", args.finetune_seeds, args.finetune_steps)
    values[name] = {k: v for k, v in {**same, **packages}.items() if k != "about"}
  return values


def _pooled(seeds: list[dict], row: str, measure: str) -> list[float]:
  """A measure's values over every seed of an objective (and the probe's or fine-tuning's seeds)."""
  return [v for r in seeds if "downstream" in r for v in r["downstream"][row].get(measure, [])]


def _metrics_text(final: dict) -> str:
  """The objective's other validation metrics (pretrain/family.py), e.g. 'accuracy 0.21, pair accuracy 0.64'."""
  return ", ".join(f"{k.replace('_', ' ')} {v:.3f}" for k, v in final.items() if k not in _OWN_COLUMN)


def table(results: dict[str, list[dict]], batch: int) -> str:
  """Pre-training, per objective: the shapes, and the validation figures with their intervals over the seeds."""
  lines = ["| objective | model family | parameters | tokens/step (rows x (inputs + targets)) | target tokens/step "
           "| GFLOP/step | val loss (step 0) | val bits/byte | other validation metrics (first seed) "
           "| CLM val loss (yardstick) | tokens/s | wall s |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
  for name, seeds in results.items():
    r = seeds[0]
    yardstick = [s["yardstick"] for s in seeds if s["yardstick"] is not None]
    bits = [s["final_eval"]["bits_per_byte"] for s in seeds if "bits_per_byte" in s["final_eval"]]
    lines.append(f"| {name} | {r['family']} | {r['params']:,} | {_row_text(r, batch)} | "
                 f"{r['target_tokens_per_step']:,.0f} | {r['gflop_per_step']:.1f} | "
                 f"{stats.text([s['loss'] for s in seeds])} ({r['initial_loss']:.2f}) | "
                 f"{stats.text(bits) if bits else 'n/a'} | {_metrics_text(r['final_eval'])} | "
                 f"{stats.text(yardstick) if yardstick else 'n/a'} | "
                 f"{statistics.median(s['tokens_per_second'] for s in seeds):,.0f} | "
                 f"{statistics.median(s['wall'] for s in seeds):.0f} |")
  return "\n".join(lines)


def downstream_table(results: dict[str, list[dict]]) -> str:
  """Downstream, per objective: each measure of the trained models and of their initial parameters."""
  lines = ["| objective | " + " | ".join(f"{title} | {title}, {INIT}" for _, title in MEASURES) + " |",
           "| --- |" + " ---: | ---: |" * len(MEASURES)]
  for name, seeds in results.items():
    cells = [stats.text(_pooled(seeds, row, key)) if _pooled(seeds, row, key) else "n/a"
             for key, _ in MEASURES for row in ("model", INIT)]
    lines.append(f"| {name} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def verdicts(results: dict[str, list[dict]]) -> list[str]:
  """Which differences exceed the noise (95% intervals apart): each objective against its initial parameters,
  and the objectives against each other, per measure."""
  lines = []
  for key, title in MEASURES:
    values = {name: (_pooled(seeds, "model", key), _pooled(seeds, INIT, key)) for name, seeds in results.items()}
    values = {name: v for name, v in values.items() if v[0] and v[1]}
    if not values:
      continue
    above = [n for n, (m, i) in values.items() if stats.differ(m, i) and np.mean(m) > np.mean(i)]
    below = [n for n, (m, i) in values.items() if stats.differ(m, i) and np.mean(m) < np.mean(i)]
    apart = stats.apart({name: model for name, (model, _) in values.items()})
    lines.append(f"- **{title}**: above their random init beyond the noise: {', '.join(above) or 'none'}; below: "
                 f"{', '.join(below) or 'none'}. Objectives apart from each other: {', '.join(apart) or 'none'}.")
  return lines


def plot(results: dict[str, list[dict]], path: str) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, (own, common, down) = plt.subplots(1, 3, figsize=(19, 4.8))
  for name, seeds in results.items():
    r = seeds[0]
    line, = own.plot(*zip(*r["curve"]), "o-", markersize=3, label=f"{name} ({r['family']})")
    if r["yardstick_curve"]:
      common.plot(*zip(*r["yardstick_curve"]), "o-", markersize=3, color=line.get_color(), label=name)
  own.set_title("validation loss of each objective's own task, first seed (not comparable across objectives)",
                fontsize=9)
  own.set_ylabel("validation loss (nats; log scale)")
  own.set_yscale("log")
  common.set_title("common yardstick: CLM validation loss, decoder-only models, first seed", fontsize=9)
  common.set_ylabel("CLM cross-entropy per token (nats)")
  for ax in (own, common):
    ax.set_xlabel("tokens processed (batch x row length x steps)")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=8)
  names = list(results)
  width = 0.8 / (2 * len(MEASURES))
  for m, (key, title) in enumerate(MEASURES):
    for k, row in enumerate(("model", INIT)):
      found = [stats.interval(_pooled(results[n], row, key)) if _pooled(results[n], row, key) else (np.nan, 0)
               for n in names]
      x = np.arange(len(names)) + (2 * m + k - len(MEASURES) + 0.5) * width
      down.bar(x, [f[0] for f in found], width, yerr=[0 if np.isnan(f[1]) else f[1] for f in found],
               color=f"C{m}", alpha=1.0 if row == "model" else 0.35, label=f"{title}" + ("" if row == "model"
                                                                                        else f", {INIT}"))
  down.set_xticks(np.arange(len(names)), names, rotation=45, ha="right", fontsize=8)
  down.set_ylabel("test accuracy (95% interval over seeds)")
  down.set_title("downstream, held-out documents: trained (solid) and initial parameters (pale)", fontsize=9)
  down.grid(alpha=0.3, axis="y")
  down.legend(fontsize=7)
  fig.savefig(path, dpi=100, bbox_inches="tight")
  plt.close(fig)


def report(results: dict[str, list[dict]], args, argv: list[str], load: str) -> str:
  first = next(iter(results.values()))[0] if results else {"tokens_per_step": 0}
  budget = first["tokens_per_step"]
  seeds = ", ".join(map(str, runs.seeds(args.seeds)))
  return runs.report("tools/compare_objectives.py", argv, load, [
      "# Which objective? Small models on the same token budget",
      f"Token budget, the same for every objective: {args.steps} steps x {args.batch_size} rows x {args.seq_len} "
      f"token positions = {args.steps * budget:,} tokens processed ({budget:,} per step). An encoder-decoder row "
      "is inputs + targets (split per objective to fit its examples), a decoder-only prefix-LM row inputs + "
      "targets, a CLM or MLM row seq_len tokens. Same data (the bundled corpus's train split), optimizer and "
      f"schedule; each objective with the seeds {seeds} (train.seed: initialisation, data order, noise). A "
      "figure 'a +- b' is the mean and the half-width of its 95% interval (Student's t) over the seeds.",
      "## Pre-training",
      table(results, args.batch_size),
      "**The validation losses of different objectives are not comparable**: each is that objective's own "
      "loss. For the generative objectives and MLM it is the cross-entropy per target token: CLM predicts "
      "every next token; prefix LM only the continuation, after reading a prefix both ways; span corruption and "
      "UL2 the corrupted spans, interleaved with sentinel tokens that are easy to predict; MLM the 15% masked "
      "tokens from both sides. NSP and SOP add to MLM's the cross-entropy of the pair head (does the second "
      "segment continue the first? chance: log 2 = 0.693). ELECTRA's is its generator's MLM cross-entropy "
      "plus 50 times its discriminator's binary cross-entropy over every token; its parameters count the "
      "generator, which is not kept. Contrastive's is InfoNCE over the batch's 16 rows (chance: log 16 = "
      "2.77); its other metrics are Wang & Isola's alignment (lower: the two dropout views agree) and "
      "uniformity (lower: representations spread over the sphere), and accuracy is how often a row's other "
      "view is its nearest of the batch. Bits per byte divide each loss (in bits) by the bytes of the text its "
      "targets hold: the same text scale for every objective, still not the same task. Compare each curve's "
      "fall, and the yardstick: the CLM validation loss on the same validation rows (`data.eval_objectives`), "
      "which every decoder-only model has and the encoder-decoder and encoder-only models do not (n/a).",
      "## Downstream",
      downstream_table(results),
      f"Test accuracy on documents no run pre-trained on (the corpus's downstream split, 15% of its documents), "
      f"beside the same architecture at its initial parameters (the baseline pre-training must beat; chance is "
      f"not the baseline: random features already carry the words). Same-document probe: a linear classifier "
      f"on the frozen mean hidden state of 32-token passages tells whether two come from one document (chance "
      f"0.5), {args.probe_seeds} probe seeds per run. Package probe: which standard-library package a docstring "
      f"comes from (24 ways; trained on the corpus's train documents, chosen on its validation documents, tested "
      f"on its downstream ones), a linear classifier on frozen features (it draws nothing: one value per run). "
      f"Package fine-tuned: the whole model and a linear head, {args.finetune_steps} steps of 32 passages, "
      f"{args.finetune_seeds} fine-tuning seeds per run. An encoder-decoder is read through its encoder.",
      "Beyond the noise (the two 95% intervals apart):",
      "\n".join(verdicts(results)),
      "Target tokens/step counts the loss-bearing tokens of the validation batches. GFLOP/step is model FLOPs "
      "(pretrain/train/flops.py). " + runs.TIMING_NOTE,
      f"![validation curves and downstream accuracies]({os.path.basename(args.out)}.png)"])


@exit_on_user_error
def main(argv: list[str], prog: str = "tools/compare_objectives.py") -> int:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--objectives", default=DEFAULT_OBJECTIVES,
                      help=f"comma-separated, of {', '.join(objectives.NAMES)}")
  runs.add_flags(parser, "compare_objectives", "token positions per row, inputs + targets", "OBJECTIVE/seedS")
  parser.add_argument("--seeds", default="0,1", help="pre-training seeds of every objective, comma-separated")
  parser.add_argument("--d_model", type=int, default=128, help="model width")
  parser.add_argument("--num_layers", type=int, default=2, help="decoder-only and encoder-only layers")
  parser.add_argument("--enc_dec_layers", type=int, default=0,
                      help="encoder-decoder: layers in each of the encoder and decoder (0: --num_layers)")
  parser.add_argument("--head_dim", type=int, default=64, help="dimension of each attention head")
  parser.add_argument("--num_heads", type=int, default=0, help="0: d_model / head_dim")
  parser.add_argument("--mlp_dim", type=int, default=0, help="0: 3 x d_model")
  parser.add_argument("--probe_documents", type=int, default=2000,
                      help="held-out documents of the same-document probe (0: no downstream evaluation)")
  parser.add_argument("--probe_seeds", type=int, default=5, help="same-document probe seeds per run")
  parser.add_argument("--finetune_seeds", type=int, default=2, help="fine-tuning seeds per run (0: no fine-tuning)")
  parser.add_argument("--finetune_steps", type=int, default=300, help="fine-tuning steps of 32 passages")
  args, base = cli.parse_command_line(parser, argv)
  names = [n.strip() for n in args.objectives.split(",") if n.strip()]
  for name in names:
    objectives.get(name)  # An unknown name fails now, not after the first runs.
  if len(set(names)) != len(names):
    raise UserError(f"--objectives names one twice: {args.objectives}")
  seeds = runs.seeds(args.seeds)
  if args.probe_documents and (args.probe_seeds < 1 or args.finetune_seeds < 0 or args.finetune_steps < 1):
    raise UserError("--probe_seeds and --finetune_steps must be at least 1, --finetune_seeds at least 0")
  configs = {name: run_config(base, name, args) for name in names}  # Length errors before any training.
  for cfg in configs.values():
    objectives.validate(cfg)
  load = runs.machine()
  print(f"{len(names)} objectives x {len(seeds)} seeds, runs of {args.steps} steps x {args.batch_size} x "
        f"{args.seq_len} tokens; {load}", flush=True)
  results = {}
  for i, (name, cfg) in enumerate(configs.items(), 1):
    results[name] = []
    for seed in seeds:
      seeded = cfg.copy_and_resolve_references()
      seeded.train.seed = seed
      workdir = os.path.join(args.out_dir, name, f"seed{seed}")
      r = runs.train_one(seeded, workdir)
      if args.probe_documents:
        r["downstream"] = downstream(workdir, args)
      results[name].append(r)
      probed = ", ".join(f"{title} {stats.text(r['downstream']['model'][key])}" for key, title in MEASURES
                         if key in r.get("downstream", {}).get("model", {}))
      print(f"[{i}/{len(names)}] {name:<18} seed {seed} {r['family']:<25} {r['params']:>10,} params  val loss "
            f"{r['loss']:.3f} (step 0: {r['initial_loss']:.2f})  {probed}  {r['tokens_per_second']:>6,.0f} "
            f"tokens/s  {r['wall']:.0f} s", flush=True)
  runs.write_report(args.out, lambda path: plot(results, path), report(results, args, argv, load),
                    table(results, args.batch_size) + "\n\n" + downstream_table(results))
  return 0
