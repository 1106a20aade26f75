"""Which objective? Trains one small model per pre-training objective on the same token budget and compares them.

  python tools/compare_objectives.py [--objectives=clm,prefix_lm_decoder,span_corruption,ul2,mlm,nsp,sop,electra,
      contrastive] [--steps=300]
      [--batch_size=16] [--seq_len=128] [--d_model=128] [--num_layers=2] [--enc_dec_layers=N] [--probe_documents=N]
      [--out=docs/compare_objectives] [--out_dir=runs/compare_objectives] [--config.KEY=VALUE ...]

Every objective trains from scratch on the bundled corpus (configs/quickstart.py, or --config, plus
--config.KEY=VALUE overrides) with the same seed, optimizer and schedule (contrastive adds SimCSE's dropout
of 0.1, which its two views need), in its own workdir
OUT_DIR/OBJECTIVE (an earlier run there is deleted first), in this process: runs do not share state
(two runs of one objective with another in between log identical losses).

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

import ml_collections

from pretrain import cli, objectives, run as run_lib
from pretrain.errors import UserError, exit_on_user_error
from pretrain.experiments import runs

DEFAULT_OBJECTIVES = "clm,prefix_lm_decoder,span_corruption,ul2,mlm,nsp,sop,electra,contrastive"
# Validation metrics not shown in a column of their own (the loss is; perplexity follows from it).
_OWN_COLUMN = ("loss", "perplexity")


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
  m = cfg.model
  m.d_model, m.num_layers, m.head_dim = args.d_model, args.num_layers, args.head_dim
  m.num_heads = m.num_kv_heads = args.num_heads or max(1, args.d_model // args.head_dim)
  m.mlp_dim = args.mlp_dim or 3 * args.d_model
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


def probe(workdir: str, documents: int) -> dict:
  """The same-document probe's test accuracy of a finished run and of its initial parameters (pretrain probe)."""
  from pretrain.train import probe as probe_lib  # pylint: disable=g-import-not-at-top
  run, params, _ = run_lib.load(workdir)
  return {"probe": probe_lib.probe_run(run, params, max_documents=documents)["accuracy"],
          "probe_init": probe_lib.probe_run(run, run.create_state().params, max_documents=documents)["accuracy"]}


def _metrics_text(final: dict) -> str:
  """The objective's other validation metrics (pretrain/family.py), e.g. 'accuracy 0.21, pair accuracy 0.64'."""
  return ", ".join(f"{k.replace('_', ' ')} {v:.3f}" for k, v in final.items() if k not in _OWN_COLUMN)


def table(results: list[dict], batch: int) -> str:
  lines = ["| objective | model family | parameters | tokens/step (rows x (inputs + targets)) | target tokens/step "
           "| GFLOP/step | val loss (step 0) | other validation metrics | CLM val loss (yardstick) "
           "| probe accuracy (step 0) | tokens/s | wall s |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
  for r in results:
    yardstick = f"{r['yardstick']:.3f}" if r["yardstick"] is not None else "n/a"
    probed = f"{r['probe']:.3f} ({r['probe_init']:.3f})" if "probe" in r else "n/a"
    lines.append(f"| {r['objective']} | {r['family']} | {r['params']:,} | {_row_text(r, batch)} | "
                 f"{r['target_tokens_per_step']:,.0f} | {r['gflop_per_step']:.1f} | {r['loss']:.3f} "
                 f"({r['initial_loss']:.2f}) | {_metrics_text(r['final_eval'])} | {yardstick} | {probed} | "
                 f"{r['tokens_per_second']:,.0f} | "
                 f"{r['wall']:.0f} |")
  return "\n".join(lines)


def plot(results: list[dict], path: str) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, (own, common) = plt.subplots(1, 2, figsize=(13, 4.8))
  for r in results:
    line, = own.plot(*zip(*r["curve"]), "o-", markersize=3, label=f"{r['objective']} ({r['family']})")
    if r["yardstick_curve"]:
      common.plot(*zip(*r["yardstick_curve"]), "o-", markersize=3, color=line.get_color(), label=r["objective"])
  own.set_title("validation loss of each objective's own task (not comparable across objectives)", fontsize=9)
  own.set_ylabel("validation loss (nats; log scale)")
  own.set_yscale("log")
  common.set_title("common yardstick: CLM validation loss, decoder-only models", fontsize=9)
  common.set_ylabel("CLM cross-entropy per token (nats)")
  for ax in (own, common):
    ax.set_xlabel("tokens processed (batch x row length x steps)")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=8)
  fig.savefig(path, dpi=100, bbox_inches="tight")
  plt.close(fig)


def report(results: list[dict], args, argv: list[str], load: str) -> str:
  budget = results[0]["tokens_per_step"] if results else 0
  return runs.report("tools/compare_objectives.py", argv, load, [
      "# Which objective? Small models on the same token budget",
      f"Token budget, the same for every objective: {args.steps} steps x {args.batch_size} rows x {args.seq_len} "
      f"token positions = {args.steps * budget:,} tokens processed ({budget:,} per step). An encoder-decoder row "
      "is inputs + targets (split per objective to fit its examples), a decoder-only prefix-LM row inputs + "
      "targets, a CLM or MLM row seq_len tokens. Same data (the bundled corpus), seed, optimizer and schedule.",
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
      "view is its nearest of the batch. Compare each curve's fall, and the yardstick: the CLM validation "
      "loss on the same validation rows (`data.eval_objectives`), which every decoder-only model has and the "
      "encoder-decoder and encoder-only models do not (n/a).",
      "Probe accuracy is the downstream probe (`pretrain probe`): a linear classifier on each model's frozen "
      "representations (the mean final hidden state of a 32-token passage; the encoder's for an encoder-decoder) "
      "that tells whether two passages come from the same document, tested on documents it was not fitted on; "
      "chance is 0.5, and the figure in brackets is the same architecture at its initial parameters. It is one "
      "small task on one corpus, and largely lexical (two passages of a document share words): read it as "
      "whether pre-training improved on the random features, not as a general ranking for understanding tasks.",
      "Target tokens/step counts the loss-bearing tokens of the validation batches. GFLOP/step is model FLOPs "
      "(pretrain/train/flops.py). " + runs.TIMING_NOTE,
      f"![validation curves]({os.path.basename(args.out)}.png)"])


@exit_on_user_error
def main(argv: list[str], prog: str = "tools/compare_objectives.py") -> int:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--objectives", default=DEFAULT_OBJECTIVES,
                      help=f"comma-separated, of {', '.join(objectives.NAMES)}")
  runs.add_flags(parser, "compare_objectives", "token positions per row, inputs + targets", "OBJECTIVE")
  parser.add_argument("--d_model", type=int, default=128, help="model width")
  parser.add_argument("--num_layers", type=int, default=2, help="decoder-only and encoder-only layers")
  parser.add_argument("--enc_dec_layers", type=int, default=0,
                      help="encoder-decoder: layers in each of the encoder and decoder (0: --num_layers)")
  parser.add_argument("--head_dim", type=int, default=64, help="dimension of each attention head")
  parser.add_argument("--num_heads", type=int, default=0, help="0: d_model / head_dim")
  parser.add_argument("--mlp_dim", type=int, default=0, help="0: 3 x d_model")
  parser.add_argument("--probe_documents", type=int, default=2000,
                      help="documents of the same-document probe of each run (pretrain probe; 0: no probe)")
  args, base = cli.parse_command_line(parser, argv)
  names = [n.strip() for n in args.objectives.split(",") if n.strip()]
  for name in names:
    objectives.get(name)  # An unknown name fails now, not after the first runs.
  if len(set(names)) != len(names):
    raise UserError(f"--objectives names one twice: {args.objectives}")
  configs = [run_config(base, name, args) for name in names]  # Length errors before any training.
  for cfg in configs:
    objectives.validate(cfg)
  load = runs.machine()
  print(f"{len(names)} runs of {args.steps} steps x {args.batch_size} x {args.seq_len} tokens; {load}", flush=True)
  results = []
  for i, (name, cfg) in enumerate(zip(names, configs), 1):
    r = runs.train_one(cfg, os.path.join(args.out_dir, name))
    if args.probe_documents:
      r.update(probe(os.path.join(args.out_dir, name), args.probe_documents))
    results.append(r)
    print(f"[{i}/{len(names)}] {name:<18} {r['family']:<25} {r['params']:>10,} params  val loss {r['loss']:.3f} "
          f"(step 0: {r['initial_loss']:.2f})  probe {r.get('probe', float('nan')):.3f}  "
          f"{r['tokens_per_second']:>6,.0f} tokens/s  {r['wall']:.0f} s",
          flush=True)
  runs.write_report(args.out, lambda path: plot(results, path), report(results, args, argv, load),
                    table(results, args.batch_size))
  return 0
