"""Which objective? Trains small models per pre-training objective on the same token budget, with several
seeds, and compares them: their own validation losses, count-based reference models, zero-shot tasks scored by
likelihood and probes, each run beside its own initial parameters.

  pretrain experiment compare_objectives
      [--objectives=clm,prefix_lm_decoder,span_corruption,ul2,mass,mlm,nsp,sop,electra,contrastive] [--seeds=0,1,2,3,4] [--other_seeds=0,1,2] [--probe_seeds=5] [--finetune_seeds=0]
      [--steps=750] [--batch_size=16] [--seq_len=128] [--d_model=128] [--num_layers=2] [--enc_dec_layers=N]
      [--lr_grid=1e-3,3e-3,1e-2] [--lr_seeds=100] [--probe_documents=N] [--zero_shot_items=N]
      [--out=docs/compare_objectives] [--out_dir=runs/compare_objectives] [--config.KEY=VALUE ...]

Every objective trains from scratch on the bundled corpus (configs/quickstart.py, or --config, plus
--config.KEY=VALUE overrides), the same optimizer and schedule (contrastive adds SimCSE's dropout of 0.1, which
its two views need) at its own peak learning rate, in its own workdir OUT_DIR/OBJECTIVE/seedS. The rate is
chosen first: the objective trains at each rate of --lr_grid with --lr_seeds (seeds no reported run has, in
OUT_DIR/OBJECTIVE/lrRATE/seedS), and the rate of its lowest own validation loss is its rate. The default budget
stays within 4 epochs of the train split (750 steps of 16 x 128 positions: 3.9 times its 394k tokens), where
repeated text would start to reward the objectives whose noise acts as augmentation. The core objectives (CORE: CLM, prefix LM, span
corruption, UL2, MLM) run with each of --seeds, the others with --other_seeds (train.seed: initialisation, data
order, noise). A finished run keeps its measurements in its workdir (pretrain/experiments/arms.py) and is not run
again while its config and the downstream flags are unchanged, so an interrupted comparison continues where it
stopped.

Each run and its own initial parameters are measured downstream on documents no run pre-trains on
(pretrain/downstream/): the zero-shot tasks (minimal pairs and a cloze scored by the model's likelihood:
random parameters score chance), the same-document probe (--probe_seeds probe seeds, averaged within the run),
the package task's linear probe and, with --finetune_seeds, the package task fine-tuned. The statistics are the
run's (pretrain/downstream/stats.py): a figure 'a +- b' is the mean over runs and the half-width of its 95%
interval; a run against its initial parameters is a paired difference; objectives compare by Welch's t on their
gains over their initialisation, Holm-corrected over every pair. Count-based unigram, bigram and trigram models
(pretrain/downstream/ngram.py) on the same vocabulary give reference rows for bits per byte and the zero-shot
tasks.

Same token budget: every step processes batch_size rows of seq_len token positions, for --steps steps.
A CLM (decoder-only) or encoder-only row (MLM, NSP, SOP, ELECTRA, contrastive) is seq_len tokens; a decoder-only
prefix-LM row is inputs + targets = seq_len; an encoder-decoder row is inputs_length + targets_length = seq_len,
split per objective: span corruption takes the largest inputs_length whose targets still fit (128 -> 104 + 24,
near T5's 512 + 114), UL2 the largest that fits all its denoisers (128 -> 64 + 64, as its X-denoisers at
density 0.5 need targets as long as inputs), prefix LM and MASS half and half. So all models process the same
token positions; they do not predict the same number of target tokens (measured and reported), nor read
the same number of corpus tokens. With --enc_dec_layers equal to --num_layers (the default) an
encoder-decoder has about 1.4-2x the parameters of the decoder-only model, but each token still passes
through num_layers layers, so the layers' FLOPs per token match (as in the UL2 paper's compute-matched
comparisons); its output layer runs over the targets only, so with a small model and a 4096-way output
layer it does fewer FLOPs per step (GFLOP/step is reported).

Writes OUT.png (validation loss against tokens processed, the CLM yardstick of the decoder-only models, and each
objective's downstream gains over its initialisation) and OUT.md (the command, machine, date and the tables,
also printed). Each run's own console output goes to OUT_DIR/OBJECTIVE/seedS/train.log.
"""

import functools
import math
import os
import statistics

import ml_collections
import numpy as np

from pretrain import cli, objectives, run as run_lib
from pretrain.downstream import stats, zero_shot
from pretrain.downstream import evaluation, likelihood
from pretrain.experiments import arms, figures, runs
from pretrain.system.errors import UserError, exit_on_user_error
from pretrain.system.errors import UserError as NotScored

DEFAULT_OBJECTIVES = "clm,prefix_lm_decoder,span_corruption,ul2,mass,mlm,nsp,sop,electra,contrastive"
# The objectives a comparison needs most replicates of (--seeds); the others run --other_seeds.
CORE = ("clm", "prefix_lm_decoder", "span_corruption", "ul2", "mlm")
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


# Downstream measures: (key of pretrain.downstream.evaluation.measure, column title); zero-shot first.
ZERO_SHOT = (("pairs_swap", "pairs: swap"), ("pairs_replace", "pairs: replace"), ("pairs_lines", "pairs: lines"),
             ("cloze", "cloze (4-way)"),
             # A span filler's own form of the pairs (zero_shot.span_accuracies): the differing words as its span.
             *((name + zero_shot.SPAN, f"pairs: {name.split('_')[1]}, as a masked span") for name in zero_shot.PAIRS))
PROBES = (("same_document_probe", "same-document probe"), ("package_probe", "package probe"),
          ("package_finetune", "package fine-tuned"))
MEASURES = ZERO_SHOT + PROBES


def item_error(limit: int | None = None, accuracy: float = 0.8) -> str:
  """The binomial 95% half-width of an accuracy near `accuracy` on each zero-shot task's items (its first `limit`,
  None: all), with their count."""
  titles = dict(ZERO_SHOT)
  return f"at an accuracy near {accuracy:g}: " + ", ".join(
      f"+- {1.96 * math.sqrt(accuracy * (1 - accuracy) / n):.2f} on the {n} items of {titles[name]}"
      for name, n in ((name, len(zero_shot.load(name)[:limit])) for name in zero_shot.TASKS))
INIT = "random init"
# In the measuring flags: figures measured before texts longer than a model's rows went unscored are measured again.
SCORED_WITHIN_ROWS = "zero-shot texts within the model's rows"


def downstream(workdir: str, args) -> dict:
  """{'model': {measure: the run's value}, 'random init': ..., 'inner': {row: {measure: [each inner seed's]}}} of
  a finished run and of its initial parameters (the same seed's); a measure with inner seeds (a probe's, a
  fine-tuning's) is their mean: the run is the unit."""
  run, params, _ = run_lib.load(workdir)
  scorer = likelihood.Scorer(run)  # Compiled once, for both rows.
  inner, not_scored = {}, {}
  for name, row_params in (("model", params), (INIT, run.create_state().params)):
    found = {}
    try:
      found.update(evaluation.measure(run, row_params, "zero_shot", 1, scorer=scorer,
                                      limit=args.zero_shot_items or None))
      not_scored = found["about"].get("not_scored", {})  # Texts longer than the model's rows: alike for both.
    except NotScored:  # A model with no token head (contrastive) scores no text.
      pass
    found.update(evaluation.measure(run, row_params, "same_document", args.probe_seeds,
                                    max_documents=args.probe_documents))
    found.update(evaluation.measure(run, row_params, "packages", args.finetune_seeds, args.finetune_seeds and
                                    args.finetune_steps))
    inner[name] = {k: v for k, v in found.items() if k != "about"}
  return {**{name: dict(zip(values, stats.run_values(values.values()))) for name, values in inner.items()},
          "inner": inner, **({"not_scored": not_scored} if not_scored else {})}


def not_scored_text(results: dict[str, list[dict]]) -> str:
  """The zero-shot measures some objective's model could not score, each with why ('' where none)."""
  titles = dict(ZERO_SHOT)
  found = {(name, titles[key], why) for name, seeds in results.items() for r in seeds
           for key, why in r.get("downstream", {}).get("not_scored", {}).items()}
  return "".join(f" {name} scores no {title} (n/a): {why}." for name, title, why in sorted(found))


def _metrics_text(finals: list[dict]) -> str:
  """The objective's other validation metrics (pretrain/families/), means over its runs, e.g. 'accuracy 0.21'."""
  return ", ".join(f"{k.replace('_', ' ')} {np.mean([f[k] for f in finals]):.3f}" for k in finals[0]
                   if k not in _OWN_COLUMN)


def _gains(seeds: list[dict], key: str) -> tuple[list[float], list[float]]:
  """(the runs' values of a measure, their initial parameters' values), over the runs that have it."""
  measured = [r["downstream"] for r in seeds if key in r.get("downstream", {}).get("model", {})]
  return [d["model"][key] for d in measured], [d[INIT][key] for d in measured]


def table(results: dict[str, list[dict]], batch: int, reference: dict) -> str:
  """Pre-training, per objective: the shapes, and the validation figures over the runs; then the count models."""
  lines = ["| objective | model family | runs | parameters | tokens/step (rows x (inputs + targets)) "
           "| target tokens/step | GFLOP/step | val loss (step 0) | val bits/byte (step 0) "
           "| CLM yardstick bits/byte | other validation metrics (mean over runs) | tokens/s | wall s |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
  for name, seeds in results.items():
    r = seeds[0]
    yardstick = [s["yardstick_bits_per_byte"] for s in seeds if s.get("yardstick_bits_per_byte") is not None]
    bits = [s["final_eval"]["bits_per_byte"] for s in seeds if "bits_per_byte" in s["final_eval"]]
    lines.append(f"| {name} | {r['family']} | {len(seeds)} | {r['params']:,} | {_row_text(r, batch)} | "
                 f"{r['target_tokens_per_step']:,.0f} | {r['gflop_per_step']:.1f} | "
                 f"{stats.text([s['loss'] for s in seeds])} ({r['initial_loss']:.2f}) | "
                 + (f"{stats.text(bits)} ({r['initial_bits_per_byte']:.2f})" if bits else "n/a") + " | "
                 f"{stats.text(yardstick) if yardstick else 'n/a'} | "
                 f"{_metrics_text([s['final_eval'] for s in seeds])} | "
                 f"{statistics.median(s['tokens_per_second'] for s in seeds):,.0f} | "
                 f"{statistics.median(s['wall'] for s in seeds):.0f} |")
  for name, values in reference.items():
    lines.append(f"| {name} | counts | 1 | | | | | {values['loss']:.3f} | {values['bits_per_byte']:.3f} | "
                 f"{values['bits_per_byte']:.3f} | | | |")
  return "\n".join(lines)


def _cell(seeds: list[dict], key: str) -> str:
  """'trained mean +- interval (its paired gain over the initial parameters +- interval)', or n/a."""
  trained, initial = _gains(seeds, key)
  if not trained:
    return "n/a"
  return f"{stats.text(trained)} ({stats.paired(trained, initial).text()})"


def downstream_table(results: dict[str, list[dict]], measures, references: dict[str, dict] | None = None) -> str:
  """Per objective and measure: the trained runs' mean and, in brackets, their gain over their own initial
  parameters (paired); then the reference rows (chance, the count models) where given."""
  measures = [(k, t) for k, t in measures if any(_gains(s, k)[0] for s in results.values())]
  lines = ["| objective | runs | " + " | ".join(title for _, title in measures) + " |",
           "| --- | ---: |" + " ---: |" * len(measures)]
  for name, seeds in results.items():
    lines.append(f"| {name} | {len(seeds)} | " + " | ".join(_cell(seeds, k) for k, _ in measures) + " |")
  for name, values in (references or {}).items():
    lines.append(f"| {name} | | " + " | ".join(f"{values[k]:.3f}" if k in values else "" for k, _ in measures) + " |")
  return "\n".join(lines)


def verdicts(results: dict[str, list[dict]], measures, best_count: dict[str, tuple[str, float]] | None = None
             ) -> list[str]:
  """Per measure, by the run-level statistics: which objectives beat (or fall below) their own initial
  parameters (paired; Holm over the objectives), which beat the best count model (one-sample over the runs), and
  which objectives are apart on their gains (Welch; Holm over every pair)."""
  lines = []
  for key, title in measures:
    values = {name: _gains(seeds, key) for name, seeds in results.items() if _gains(seeds, key)[0]}
    if not values:
      continue
    against = stats.against_initial({n: v[0] for n, v in values.items()}, {n: v[1] for n, v in values.items()})
    above = [n for n, (d, is_real) in against.items() if is_real and d.mean > 0]
    below = [n for n, (d, is_real) in against.items() if is_real and d.mean < 0]
    untested = [n for n, (d, _) in against.items() if np.isnan(d.p)]
    apart = stats.apart({n: [a - b for a, b in zip(*v)] for n, v in values.items()})
    line = (f"- **{title}**: above their own initial parameters: {', '.join(above) or 'none'}; below: "
            f"{', '.join(below) or 'none'}" + (f" (one run, untested: {', '.join(untested)})" if untested else "")
            + f". Gains apart: {', '.join(apart) or 'none'}.")
    if best_count and key in best_count:
      count, value = best_count[key]
      differences = {n: stats.one_sample(v[0], value) for n, v in values.items()}
      beyond = [n for (n, d), is_real in zip(differences.items(), stats.real(list(differences.values())))
                if is_real and d.mean > 0]
      line += f" Above the {count} ({value:.3f}): {', '.join(beyond) or 'none'}."
    lines.append(line)
  return lines


def yardstick_verdicts(results: dict[str, list[dict]], reference: dict) -> str:
  """Which decoder-only objectives' CLM bits per byte are below each count model's (one-sample over the runs)."""
  values = {name: [s["yardstick_bits_per_byte"] for s in seeds if s.get("yardstick_bits_per_byte") is not None]
            for name, seeds in results.items()}
  values = {name: v for name, v in values.items() if v}
  parts = []
  for count, bits in reference.items():
    differences = {n: stats.one_sample(v, bits["bits_per_byte"]) for n, v in values.items()}
    below = [n for (n, d), is_real in zip(differences.items(), stats.real(list(differences.values())))
             if is_real and d.mean < 0]
    parts.append(f"below the {count} ({bits['bits_per_byte']:.3f}): {', '.join(below) or 'none'}")
  return "CLM yardstick bits per byte, " + "; ".join(parts) + "."


def plot(results: dict[str, list[dict]], path: str) -> None:
  with figures.drawn(path, 3, (20, 4.8), crop=True) as (own, common, down):
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
    shown = [(k, t) for k, t in MEASURES if any(_gains(s, k)[0] for s in results.values())]
    width = 0.8 / max(len(shown), 1)
    for m, (key, title) in enumerate(shown):
      found = [stats.paired(*_gains(results[n], key)) if _gains(results[n], key)[0] else None for n in names]
      x = np.arange(len(names)) + (m - len(shown) / 2 + 0.5) * width
      down.bar(x, [f.mean if f else np.nan for f in found], width,
               yerr=[0 if not f or np.isnan(f.half) else f.half for f in found], color=f"C{m}", label=title)
    down.axhline(0, color="black", linewidth=0.8)
    down.set_xticks(np.arange(len(names)), names, rotation=45, ha="right", fontsize=8)
    down.set_ylabel("trained minus initial parameters (paired, 95% interval over runs)")
    down.set_title("downstream gains over each run's own initialisation, held-out documents", fontsize=9)
    down.grid(alpha=0.3, axis="y")
    down.legend(fontsize=7)


def report(results: dict[str, list[dict]], args, argv: list[str], load: str, reference: dict,
           zero_shot_reference: dict, chosen: dict[str, dict], epoch: int, rate: float) -> str:
  """The page; `rate` is the config's peak learning rate, every objective's where --lr_grid is empty (`chosen`
  empty)."""
  first = next(iter(results.values()))[0] if results else {"tokens_per_step": 0}
  budget = first["tokens_per_step"]
  counts = {k: v for k, v in zero_shot_reference.items() if k != "chance"}
  best_count = {key: max(((name, values[key]) for name, values in counts.items()), key=lambda item: item[1])
                for key, _ in ZERO_SHOT if all(key in values for values in counts.values())}
  rates_chosen = [] if not chosen else [
      "## Learning rates",
      f"Each objective's peak learning rate was chosen before its reported runs: it trained at each rate of the "
      f"grid with the pre-training seed{'s' * (len(runs.seeds(args.lr_seeds)) > 1)} {args.lr_seeds}, which no "
      "reported run has, and the rate of its lowest own validation loss (the mean over those runs) is the rate "
      "of all its reported runs; where that was at an edge of the rates tried, the grid went on past it, one "
      f"rate at a time at the grid's own ratio, up to {args.lr_extend} rates (--lr_extend). Its own loss judges how "
      "well it learned its own task, whatever the task; the reported runs then measure it afresh, on other seeds, "
      "so the choice does not select their noise. A rate still at an edge may not be the objective's optimum.",
      rate_table(chosen)]
  return runs.report("compare_objectives", argv, load, [
      "# Which objective? Small models on the same token budget",
      f"Token budget, the same for every objective: {args.steps} steps x {args.batch_size} rows x {args.seq_len} "
      f"token positions = {args.steps * budget:,} tokens processed ({budget:,} per step), "
      f"{args.steps * budget / epoch:.1f} times the {epoch:,} tokens of the train split, a {args.d_model}-wide "
      f"model of {args.num_layers} layer{'s' * (args.num_layers != 1)}. An encoder-decoder row is inputs + "
      "targets (split per objective to fit its examples), a decoder-only prefix-LM row inputs + targets, a CLM or "
      "MLM row seq_len tokens; a row's positions hold its text, sentinels, mode tokens and padding, so an "
      "objective reads at most that many tokens of text. Same data (the bundled corpus's train split), "
      "optimizer and schedule, "
      + ("each objective at its own peak learning rate (below); " if chosen else
         f"every objective at the config's peak learning rate, {rate:g} (--lr_grid= : no rate chosen for this "
         "page); ")
      + f"the pre-training seeds {_seeds_text(results)} (train.seed: initialisation, data order, noise). The unit "
      "is the pre-training run: a figure 'a +- b' is the mean over the runs (n in the runs column) and the "
      "half-width of its 95% interval (Student's t). What each objective learns from differs too: the target "
      "tokens per step (its loss-bearing tokens) stand beside the token positions in the table.",
      *rates_chosen,
      "## Pre-training",
      table(results, args.batch_size, reference),
      "**The validation losses of different objectives are not comparable**: each is that objective's own "
      "loss. For the generative objectives and MLM it is the cross-entropy per target token: CLM predicts "
      "every next token; prefix LM only the continuation, after reading a prefix both ways; span corruption and "
      "UL2 the corrupted spans, interleaved with sentinel tokens that are easy to predict; MASS the masked half "
      "of each segment; MLM the 15% masked tokens from both sides. NSP and SOP add to MLM's the cross-entropy of "
      "the pair head (does the second segment continue the first? chance: log 2 = 0.693). ELECTRA's is its "
      "generator's MLM cross-entropy plus 50 times its discriminator's binary cross-entropy over every token; its "
      "discriminator accuracy stands beside the accuracy of calling every token original (all original "
      "accuracy), its baseline; its parameters count the generator, which is not kept. Contrastive's is InfoNCE "
      "over the batch's rows (chance: log of the batch size); its other metrics are Wang & Isola's alignment "
      "(lower: the two dropout views agree) and uniformity (lower: representations spread over the sphere), and "
      "accuracy is how often a row's other view is its nearest of the batch. Bits per byte divide each loss (in "
      "bits) by the bytes of the text its targets hold: the same text scale for every objective, still not the "
      "same task. The CLM yardstick is the causal next-token loss, in bits per byte, on the same validation rows "
      "(`data.eval_objectives`), which every decoder-only model has and the encoder-decoder and encoder-only "
      "models do not (n/a). The count rows are n-gram models of the train split in the same vocabulary "
      "(pretrain/downstream/ngram.py: add-one unigram, interpolated Kneser-Ney bigram and trigram), scored on "
      "the yardstick's rows: a model below them has learned more than counts of adjacent tokens.",
      yardstick_verdicts(results, reference),
      "## Zero-shot, scored by likelihood",
      downstream_table(results, ZERO_SHOT, zero_shot_reference),
      f"Accuracy on held-out documents (pretrain/downstream/zero_shot.py, its files' version {zero_shot.VERSION}"
      "): minimal pairs "
      "(is the original line more likely than the copy with two adjacent words swapped, a word replaced by one "
      "of the same length and frequency, or two lines exchanged? chance 0.5) and a cloze (a passage's last word "
      "among 4 words of its document: chance 0.25). Nothing is trained for them, so initial parameters score "
      "chance by construction. Each cell: the trained runs' mean, and in brackets their paired gain over their "
      "own initial parameters. A decoder-only model scores the text's log-likelihood; an encoder-decoder the "
      "text as the span after an empty input (UL2 as its S-denoiser after [S2S], MASS after one [MASK] per "
      "token), and span corruption also in its own form, the pair's differing words as a masked span (the "
      "encoder reads the text with them replaced by <extra_id_0>, the decoder writes them: the columns 'as a "
      "masked span'; its cloze is that form already, the answer as the span after the passage); a masked LM its "
      "pseudo-log-likelihood (each token masked in turn); ELECTRA's discriminator how "
      "sure it is that every token is original; contrastive has no token head and scores nothing."
      + not_scored_text(results) + " The count "
      "rows score the same texts by their n-gram probability. The intervals are over the runs only: every run "
      "scores the same items, so the items' own sampling error (" + item_error(args.zero_shot_items or None)
      + ") is in none of them. It "
      "does not bias a comparison of two objectives on these items, but it is there when a figure is set against "
      "another test set's.",
      stats.VERDICT,
      "\n".join(verdicts(results, ZERO_SHOT, best_count)),
      "## Probes",
      downstream_table(results, PROBES),
      f"Test accuracy on held-out documents, each cell the trained runs' mean and in brackets their paired gain "
      f"over their own initial parameters (random features already carry the words, so the initial parameters, "
      f"not chance, are the baseline). Same-document probe: a linear classifier on the frozen mean hidden state "
      f"of 32-token passages tells whether two come from one document (chance 0.5), {args.probe_seeds} probe "
      f"seeds per run, averaged within the run. Package probe: which standard-library package a docstring comes "
      f"from (24 ways), a linear classifier on frozen features; word identity solves much of it, so random "
      f"features score far above the majority class (0.12)."
      + (f" Package fine-tuned: the whole model and a linear head, {args.finetune_steps} steps of 32 passages, "
         f"{args.finetune_seeds} fine-tuning seeds per run, averaged within the run." if args.finetune_seeds else "")
      + " An encoder-decoder is read through its encoder.",
      stats.VERDICT,
      "\n".join(verdicts(results, PROBES)),
      "Target tokens/step counts the loss-bearing tokens of the validation batches. GFLOP/step is model FLOPs "
      "(pretrain/train/flops.py). " + runs.TIMING_NOTE,
      f"![validation curves and downstream gains]({os.path.basename(args.out)}.png)"])


def _seeds_text(results: dict[str, list[dict]]) -> str:
  """'0, 1, 2 for clm, mlm; 0, 1 for sop': the seeds each group of objectives ran."""
  groups = {}
  for name, seeds in results.items():
    groups.setdefault(", ".join(str(r["seed"]) for r in seeds), []).append(name)
  return "; ".join(f"{seeds} for {', '.join(names)}" for seeds, names in groups.items())


def measured(args, with_downstream: bool):
  """(measure, extra) for arms.each: a run's standard figures and, `with_downstream` (and --probe_documents), its
  downstream ones; the flags that shape them, under which its figures are saved."""
  with_downstream = with_downstream and bool(args.probe_documents)
  flags = [args.probe_documents, args.probe_seeds, args.finetune_seeds, args.finetune_steps,
           *([args.zero_shot_items] if args.zero_shot_items else []),  # Keys of older runs: all items.
           SCORED_WITHIN_ROWS]

  def measure(name, cfg, workdir, wall):
    del name
    r = arms.standard_figures(cfg, workdir, wall)
    if with_downstream:
      r["downstream"] = downstream(workdir, args)
    return r

  return measure, {"downstream": flags if with_downstream else None}


def choose_rates(configs: dict, args) -> dict[str, dict]:
  """{objective: {'chosen': its peak learning rate, 'losses': {rate: its own final validation loss per
  --lr_seeds run}}}: each objective trained at every rate of --lr_grid with --lr_seeds (seeds none of the reported
  runs has), the rate of its lowest mean loss chosen; where that is at an edge of the rates tried, the grid goes on
  past it (beyond_edge), up to --lr_extend rates, until the lowest loss has a tried rate on each side. Its own
  loss measures how well it learned its own task, whatever the task; the reported runs then measure it afresh."""
  grid, seeds = rates(args.lr_grid), runs.seeds(args.lr_seeds)
  measure, extra = measured(args, False)
  chosen = {}
  for name, cfg in configs.items():
    losses = {}

    def train_at(rate):
      for seed in seeds:
        tried = cfg.copy_and_resolve_references()
        tried.optimizer.learning_rate, tried.train.seed = rate, seed
        r = arms.figures(tried, os.path.join(args.out_dir, name, f"lr{rate:g}", f"seed{seed}"),
                         functools.partial(measure, name), extra)
        losses.setdefault(rate, []).append(r["loss"])
        print(f"[rate choice] {name:<18} lr {rate:g} seed {seed}  val loss {r['loss']:.3f}", flush=True)

    for rate in grid:
      train_at(rate)
    while len(losses) < len(grid) + args.lr_extend and (rate := beyond_edge(losses)) is not None:
      train_at(rate)
    chosen[name] = {"chosen": min(losses, key=lambda rate: float(np.mean(losses[rate]))), "losses": losses}
  return chosen


def beyond_edge(losses: dict[float, list[float]]) -> float | None:
  """The next rate to try where the lowest mean loss of `losses` ({rate: losses}) is at the smallest or largest
  rate tried: one step of the grid's own ratio at that end past it; None where it is bracketed (or one rate)."""
  tried = sorted(losses)
  if len(tried) < 2:
    return None
  best = min(tried, key=lambda rate: float(np.mean(losses[rate])))
  if best == tried[0]:
    return float(f"{tried[0] * tried[0] / tried[1]:.3g}")
  if best == tried[-1]:
    return float(f"{tried[-1] * tried[-1] / tried[-2]:.3g}")
  return None


def rates(text: str) -> list[float]:
  """The learning rates of --lr_grid, e.g. '1e-3,3e-3,1e-2'."""
  try:
    values = sorted({float(v) for v in text.split(",") if v.strip()})
  except ValueError:
    raise UserError(f"--lr_grid={text!r}: give comma-separated learning rates, e.g. 1e-3,3e-3,1e-2") from None
  if not values or min(values) <= 0:
    raise UserError(f"--lr_grid={text!r}: give one or more positive learning rates")
  return values


def rate_table(chosen: dict[str, dict]) -> str:
  """Per objective: its own validation loss at each rate it tried (mean over the rate-choice runs; the grid and
  any rates past its edge), and the rate chosen."""
  grid = sorted({rate for c in chosen.values() for rate in c["losses"]})
  lines = ["| objective | " + " | ".join(f"lr {rate:g}" for rate in grid) + " | chosen |",
           "| --- |" + " ---: |" * (len(grid) + 1)]
  for name, c in chosen.items():
    tried = sorted(c["losses"])
    edge = " (grid's edge)" if c["chosen"] in (tried[0], tried[-1]) and len(tried) > 1 else ""
    lines.append(f"| {name} | " + " | ".join(f"{np.mean(c['losses'][rate]):.3f}" if rate in c["losses"] else ""
                                             for rate in grid) + f" | {c['chosen']:g}{edge} |")
  return "\n".join(lines)


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain experiment compare_objectives") -> int:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--objectives", default=DEFAULT_OBJECTIVES,
                      help=f"comma-separated, of {', '.join(objectives.NAMES)}")
  runs.add_flags(parser, "compare_objectives", "token positions per row, inputs + targets", "OBJECTIVE/seedS",
                 steps=750, seeds="0,1,2,3,4", seeds_help=f"pre-training seeds of {', '.join(CORE)}", model=True,
                 layers_help="decoder-only and encoder-only layers")
  parser.add_argument("--other_seeds", default="0,1,2", help="pre-training seeds of the other objectives")
  parser.add_argument("--enc_dec_layers", type=cli.at_least(0), default=0,
                      help="encoder-decoder: layers in each of the encoder and decoder (0: --num_layers)")
  parser.add_argument("--num_heads", type=cli.at_least(0), default=0, help="0: d_model / head_dim")
  parser.add_argument("--mlp_dim", type=cli.at_least(0), default=0, help="0: 3 x d_model")
  parser.add_argument("--probe_documents", type=cli.at_least(0), default=2000,
                      help="held-out documents of the same-document probe (0: no downstream evaluation)")
  parser.add_argument("--probe_seeds", type=cli.at_least(1), default=5, help="same-document probe seeds per run")
  parser.add_argument("--zero_shot_items", type=cli.at_least(0), default=0,
                      help="score the first N items of each zero-shot task (0: all; a quick look)")
  parser.add_argument("--finetune_seeds", type=cli.at_least(0), default=0, help="fine-tuning seeds per run (0: no fine-tuning)")
  parser.add_argument("--finetune_steps", type=cli.at_least(1), default=300, help="fine-tuning steps of 32 passages")
  parser.add_argument("--lr_grid", default="1e-3,3e-3,1e-2",
                      help="peak learning rates each objective is first trained at, with --lr_seeds; its lowest own "
                           "validation loss chooses the rate of its reported runs ('': optimizer.learning_rate for all)")
  parser.add_argument("--lr_seeds", default="100", help="pre-training seeds of the rate choice (not the reported ones)")
  parser.add_argument("--lr_extend", type=int, default=2,
                      help="rates tried past the grid's edge, one at a time, while the lowest loss is at an edge")
  args, base = cli.parse_command_line(parser, argv)
  names = [n.strip() for n in args.objectives.split(",") if n.strip()]
  for name in names:
    objectives.get(name)  # An unknown name fails now, not after the first runs.
  if len(set(names)) != len(names):
    raise UserError(f"--objectives names one twice: {args.objectives}")
  seeds = {name: runs.seeds(args.seeds if name in CORE else args.other_seeds) for name in names}
  if args.probe_documents and (args.probe_seeds < 1 or args.finetune_seeds < 0 or args.finetune_steps < 1):
    raise UserError("--probe_seeds and --finetune_steps must be at least 1, --finetune_seeds at least 0")
  configs = {name: run_config(base, name, args) for name in names}  # Length errors before any training.
  for cfg in configs.values():
    objectives.validate(cfg)
  if args.lr_grid.strip():
    rates(args.lr_grid)
  if args.lr_extend < 0:
    parser.error(f"--lr_extend={args.lr_extend}: give how many rates past the grid's edge to try, 0 or more")
  if args.lr_grid.strip() and set(runs.seeds(args.lr_seeds)) & {seed for values in seeds.values() for seed in values}:
    raise UserError(f"--lr_seeds={args.lr_seeds} shares seeds with the reported runs; choose the rates on others")
  print(f"{len(names)} objectives x {args.seeds} (core) or {args.other_seeds} seeds, runs of {args.steps} steps x "
        f"{args.batch_size} x {args.seq_len} tokens; {runs.machine()}", flush=True)
  reference, zero_shot_reference = runs.count_references(next(iter(configs.values())))
  epoch = runs.train_tokens(next(iter(configs.values())))
  chosen = choose_rates(configs, args) if args.lr_grid.strip() else {}
  for name, c in chosen.items():
    configs[name].optimizer.learning_rate = c["chosen"]

  def said(name, seed, r):
    model = r.get("downstream", {}).get("model", {})
    measured_text = "  ".join(f"{key} {model[key]:.3f}" for key, _ in MEASURES if key in model)
    print(f"[{names.index(name) + 1}/{len(names)}] {name:<18} seed {seed} {r['family']:<25} {r['params']:>10,} "
          f"params  val loss {r['loss']:.3f} (step 0: {r['initial_loss']:.2f})  {measured_text}  "
          f"{r['tokens_per_second']:>6,.0f} tokens/s  {r['wall']:.0f} s", flush=True)

  measure, extra = measured(args, True)
  results = arms.each(configs, seeds, args.out_dir, measure, {name: extra for name in configs}, said=said)
  load = arms.machine(results)
  runs.write_report(args.out, lambda path: plot(results, path),
                    report(results, args, argv, load, reference, zero_shot_reference, chosen, epoch,
                           next(iter(configs.values())).optimizer.learning_rate),
                    "\n\n".join([table(results, args.batch_size, reference),
                                 downstream_table(results, ZERO_SHOT, zero_shot_reference),
                                 downstream_table(results, PROBES)]))
  return 0
