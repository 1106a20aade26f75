"""How does data quality affect pre-training? Trains one model on each rung of a quality ladder, at the same token
budget, and scores the curation stage's filters against known defects.

  pretrain experiment data_quality [--seeds=0,1,2] [--steps=300] [--batch_size=16] [--seq_len=128] [--d_model=128]
      [--num_layers=2] [--filters=SPEC] [--dedup=near] [--seed=0] [--documents=N] [--out=docs/data_quality]
      [--out_dir=runs/data_quality] [--config.KEY=VALUE ...]

The ladder is built from the training documents of the config's source (the bundled corpus by default):
  clean       the documents as they are;
  defective   the same documents with the defects of web text put in (pretrain/experiments/web_defects.py:
              boilerplate and navigation lines, repeated paragraphs, mojibake, exact and near copies, keyword
              spam, truncated fragments, trigram-generated text), each document labelled with its defect;
  curated     the defective mix after the curation stage (--filters, --dedup; pretrain/data/curation.py).
Every rung trains the same causal-LM model from scratch (same optimizer, schedule, vocabulary: the one of the
clean documents) for the same steps x batch x seq_len tokens with each of --seeds (train.seed: a seed gives every
rung the same initial parameters), as one `pretrain sweep` per rung (OUT_DIR/RUNG/seed=S; an interrupted ladder
rerun continues), and is evaluated on the source's clean validation split. The rungs compare paired over the
seeds (pretrain/downstream/stats.py); count-based n-gram models of the clean documents give reference rows.
The labels score each filter: precision (the share of the documents it removed that were defective) and
recall (the share of the defective documents it removed), as the stage applied it (a document counts for the
first rule it fails) and for every rule alone at its published threshold.

Writes OUT.md (the command, machine, date and tables, also printed) and OUT.png (validation loss of each rung
against the step, and the share of each defect that the stage removed). The data go to OUT_DIR/data, each
run's workdir and train.log to OUT_DIR/RUNG/seed=S.
"""

import argparse
import collections
import itertools
import json
import math
import os
import shlex

import numpy as np

from pretrain import cli
from pretrain import objectives, run as run_lib
from pretrain.config import Valid
from pretrain.data import filters
from pretrain.downstream import stats
from pretrain.experiments import figures, runs, sweep, web_defects
from pretrain.system import data_cache
from pretrain.system.errors import UserError, exit_on_user_error
from pretrain.train import evaluation
from pretrain.vocab import pipeline as vocab

# Filters for documentation text: Gopher's word count rule at 50 words would remove a third of the clean
# docstrings (their median is 59 words), and C4's sentence and punctuation rules most of them
# (docs/data_quality.md scores every rule alone); these keep the rules that hold up on clean documentation.
DEFAULT_FILTERS = "words=30:100000,stop_words,duplicate_lines,duplicate_paragraphs,boilerplate=0,encoding_errors"
RUNGS = ("clean", "defective", "curated")


def write_jsonl(path: str, rows) -> None:
  with open(path, "w", encoding="utf-8") as f:
    for row in rows:
      f.write(json.dumps(row) + "\n")


def rung_flags(rung: str, data_dir: str, vocabulary_path: str, args) -> list[str]:
  """The config overrides of one rung's runs: files of the rung, the clean validation split, the shared model and
  budget."""
  curated = rung == "curated"
  train_files = os.path.join(data_dir, "clean.jsonl" if rung == "clean" else "defective.jsonl")
  return ["--config.data.source=files", "--config.data.objective=clm", "--config.data.mixture=()",
          f"--config.data.seq_len={args.seq_len}", "--config.data.eval_objectives=()",
          f"--config.data.train_files={train_files}",
          f"--config.data.validation_files={os.path.join(data_dir, 'validation.jsonl')}",
          f"--config.data.filters={args.filters if curated else ''}",
          f"--config.data.dedup={args.dedup if curated else ''}",
          f"--config.data.dedup_threshold={args.dedup_threshold}", f"--config.tokenizer.path={vocabulary_path}",
          *runs.budget_flags(args.steps, args.batch_size, args.evals),
          *runs.model_flags(args.d_model, args.num_layers, args.head_dim)]


def score(removed: list[str | None], labels: list[str]) -> dict:
  """Precision and recall of the removals (a reason per document, None: kept) against the defect labels."""
  defective = sum(label != "clean" for label in labels)
  out = {}
  for reason in dict.fromkeys(r for r in removed if r):
    hits = [label for r, label in zip(removed, labels) if r == reason]
    caught = sum(label != "clean" for label in hits)
    out[reason] = {"removed": len(hits), "precision": caught / len(hits), "recall": caught / max(defective, 1),
                   "clean_removed": len(hits) - caught, "defects": collections.Counter(hits)}
  return out


def rules_alone(texts: list[str], labels: list[str]) -> dict:
  """score() of every filter rule on its own at its published threshold."""
  found = {}
  for name in filters.RULES:
    rule = filters.parse(name)
    found[name] = score([name if filters.first_failing(rule, t) else None for t in texts], labels).get(
        name, {"removed": 0, "precision": float("nan"), "recall": 0.0, "clean_removed": 0})
  return found


def _row(name: str, s: dict, clean_total: int) -> str:
  precision = "n/a" if math.isnan(s["precision"]) else f"{s['precision']:.2f}"
  return (f"| {name} | {s['removed']:,} | {precision} | {s['recall']:.3f} | {s['clean_removed']:,} "
          f"({s['clean_removed'] / clean_total:.1%}) |")


def tables(results: dict[str, list[dict]], stage: dict, alone: dict, labels: list[str], reference: dict
           ) -> list[str]:
  clean_total = sum(label == "clean" for label in labels)
  counts = collections.Counter(labels)
  runs_table = ["| rung | training documents | defective share | training tokens | runs | validation loss (step 0) "
                "| validation bits/byte | validation perplexity (of the mean loss) | tokens/s |",
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
  for rung, seeds in results.items():
    r = seeds[0]
    runs_table.append(f"| {rung} | {r['documents']:,} | {r['defective_share']:.1%} | {r['tokens']:,} | {len(seeds)} | "
                      f"{stats.text([x['loss'] for x in seeds])} ({r['initial_loss']:.2f}) | "
                      f"{stats.text([x['final_eval']['bits_per_byte'] for x in seeds])} | "
                      f"{math.exp(np.mean([x['loss'] for x in seeds])):.1f} | "
                      f"{np.median([x['tokens_per_second'] for x in seeds]):,.0f} |")
  for name, values in reference.items():
    runs_table.append(f"| {name} of the clean documents | | | | | {values['loss']:.3f} | "
                      f"{values['bits_per_byte']:.3f} | {math.exp(values['loss']):.1f} | |")
  header = ["| rule | documents removed | precision | recall | clean documents removed (share of clean) |",
            "| --- | ---: | ---: | ---: | ---: |"]
  stage_table = header + [_row(name, s, clean_total) for name, s in stage.items()]
  alone_table = header + [_row(name, s, clean_total) for name, s in alone.items()]
  removed_by_defect = collections.Counter(label for s in stage.values() for label in s["defects"].elements())
  defects_table = ["| defect | documents in the mix | removed by the stage | share removed |",
                   "| --- | ---: | ---: | ---: |"]
  for defect in ("clean", *web_defects.DEFECTS):
    defects_table.append(f"| {defect} | {counts[defect]:,} | {removed_by_defect[defect]:,} | "
                         f"{removed_by_defect[defect] / max(counts[defect], 1):.1%} |")
  return ["\n".join(t) for t in (runs_table, stage_table, alone_table, defects_table)]


def verdict(results: dict[str, list[dict]]) -> str:
  """The rungs' validation losses compared paired over the seeds (Holm), and the share of the defective rung's
  excess over the clean one that curation takes back, per seed."""
  losses = {rung: {r["seed"]: r["loss"] for r in seeds} for rung, seeds in results.items()}
  apart = stats.apart(losses, higher_better=False, pair=True)
  closed = [(losses["defective"][s] - losses["curated"][s]) / (losses["defective"][s] - losses["clean"][s])
            for s in losses["clean"] if losses["defective"][s] != losses["clean"][s]]
  return (f"{stats.VERDICT} validation loss, lower is better: {', '.join(apart) or 'no two rungs apart'}. Of "
          f"the defective rung's excess loss over the clean one, curation takes back {stats.text(closed, 2)} "
          "(the share per seed, mean +- 95% interval).")


def on_clean_rows(judge, point: str) -> dict[str, float]:
  """{'loss', 'bits_per_byte'} of a run's final parameters on `judge`'s validation rows: the clean rung's run,
  whose validation split no filter touched, so that every rung is scored on the same rows (the curation stage
  filters a curated run's own validation split too)."""
  _, params, _ = run_lib.load(point)
  with judge.activated():
    batches = evaluation.global_batches(judge, judge.task, judge.objective, "validation", judge.cfg.train.eval_batches)
    found = evaluation.evaluate(judge.family, judge.eval_step, params, batches)
  return {"loss": found["eval/loss"], "bits_per_byte": found["eval/bits_per_byte"]}


def plot(results: dict[str, list[dict]], shares: dict, path: str) -> None:
  with figures.drawn(path, 2, (13, 4.8), crop=True) as (curves, bars):
    for rung, seeds in results.items():
      line, = curves.plot(*zip(*seeds[0]["curve"]), "o-", markersize=3,
                          label=f"{rung} ({seeds[0]['documents']:,} documents)")
      for r in seeds[1:]:
        curves.plot(*zip(*r["curve"]), "-", color=line.get_color(), alpha=0.35)
    curves.set_title("validation loss on the clean validation split, same token budget (each seed)", fontsize=9)
    curves.set_xlabel("tokens processed")
    curves.set_ylabel("cross-entropy per token (nats)")
    curves.legend(fontsize=8)
    curves.grid(alpha=0.3)
    names = list(shares)
    bars.barh(names, [shares[n] for n in names], color=["gray" if n == "clean" else "tab:red" for n in names])
    bars.set_xlim(0, 1)
    bars.set_title("share of each kind of document that the curation stage removed", fontsize=9)
    bars.invert_yaxis()
    bars.grid(alpha=0.3, axis="x")


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain experiment data_quality") -> int:
  parser = cli.parser_for(prog, __doc__)
  runs.add_flags(parser, "data_quality", "tokens per row", "RUNG/seed=S", model=True)
  parser.add_argument("--filters", default=DEFAULT_FILTERS, help="data.filters of the curated rung")
  parser.add_argument("--dedup", default="near", help="data.dedup of the curated rung")
  parser.add_argument("--dedup_threshold", type=cli.number(Valid(lambda v: 0 < v <= 1, "in (0, 1]")), default=0.8, help="data.dedup_threshold of the curated rung")
  parser.add_argument("--seed", type=cli.seed, default=0, help="where the defects go")
  parser.add_argument("--documents", type=cli.at_least(0), default=0, help="build the ladder from the first N training "
                      "documents (0: all)")
  args, base = cli.parse_command_line(parser, argv)
  # pylint: disable-next=g-import-not-at-top  (data stack: not for generate)
  from pretrain.data import filters, sources, token_store
  filters.parse(args.filters)  # A bad spec fails now, not after the first runs.
  if args.dedup not in ("", "exact", "near"):
    raise UserError(f"--dedup={args.dedup!r}: give exact, near or ''")
  seeds = runs.seeds(args.seeds)

  source = sources.make_source(base.data)
  documents = list(itertools.islice(source.texts("train"), args.documents or None))
  if len(documents) < 20:
    raise UserError(f"the source holds {len(documents)} training documents; the ladder needs at least 20")
  # Of the clean documents, shared by every rung.
  vocabulary = vocab.get_vocabulary(base, source, objectives.pieces(base))
  mix = web_defects.inject(documents, args.seed)
  texts, labels = [t for t, _ in mix], [label for _, label in mix]
  data_dir = os.path.abspath(os.path.join(args.out_dir, "data"))
  os.makedirs(data_dir, exist_ok=True)
  write_jsonl(os.path.join(data_dir, "clean.jsonl"), ({"text": t} for t in documents))
  write_jsonl(os.path.join(data_dir, "defective.jsonl"), ({"text": t, "defect": d} for t, d in mix))
  write_jsonl(os.path.join(data_dir, "validation.jsonl"), ({"text": t} for t in source.texts("validation")))

  user = sweep.config_flags(argv)
  flags = {rung: [*user, *rung_flags(rung, data_dir, vocabulary.file, args)] for rung in RUNGS}
  configs = {rung: cli.parse_command_line(argparse.ArgumentParser(add_help=False), f)[1] for rung, f in flags.items()}
  curated = sources.make_source(configs["curated"].data).curation
  reasons = curated.reasons
  removed = [reasons[c] if c else None for c in curated.decisions()["train"]]
  stage = score(removed, labels)
  load = runs.machine()
  print(f"Ladder of {len(documents):,} clean documents: {len(mix):,} in the defective mix "
        f"({sum(label != 'clean' for label in labels) / len(mix):.1%} defective), {removed.count(None):,} kept "
        f"by the stage; 3 rungs x {len(seeds)} seeds of {args.steps} steps x {args.batch_size} x {args.seq_len} "
        f"tokens; {load}", flush=True)
  reference, _ = runs.count_references(configs["clean"])
  kept = {"clean": ["clean"] * len(documents), "defective": labels,
          "curated": [label for label, r in zip(labels, removed) if r is None]}
  results, commands, judge = {}, {}, None
  for i, rung in enumerate(RUNGS, 1):
    results[rung], sweep_argv = sweep.seeded(os.path.join(args.out_dir, rung), flags[rung], seeds)
    commands[rung] = shlex.join(a.replace(os.getcwd() + os.sep, "") for a in sweep_argv)  # The page's paths.
    judge = judge or run_lib.Run.build_with_data(configs["clean"])  # After the clean runs built its data.
    for r in results[rung]:  # Every rung on the clean validation rows (its own curve stays on its own rows).
      scored = on_clean_rows(judge, os.path.join(args.out_dir, rung, f"seed={r['seed']}"))
      r["loss"], r["final_eval"]["bits_per_byte"] = scored["loss"], scored["bits_per_byte"]
    run = run_lib.Run.build_with_data(configs[rung])
    (task, rung_source, _), = run.member_tasks()  # Its token store, built by the runs: the tokens they trained on.
    store = token_store.open_or_build(task, rung_source, "train", run.vocabulary, data_cache.cache_dir(run.cfg.data))
    for r in results[rung]:
      r.update(rung=rung, documents=len(kept[rung]), tokens=int(store.meta["tokens"]),
               defective_share=sum(label != "clean" for label in kept[rung]) / len(kept[rung]))
    loss = [r["loss"] for r in results[rung]]
    print(f"[{i}/3] {rung:<10} {len(kept[rung]):>6,} documents  val loss {stats.text(loss)} (perplexity "
          f"{math.exp(np.mean(loss)):.1f})", flush=True)
  alone = rules_alone(texts, labels)
  counts = collections.Counter(labels)
  removed_by_defect = collections.Counter(label for s in stage.values() for label in s["defects"].elements())
  shares = {d: removed_by_defect[d] / max(counts[d], 1) for d in ("clean", *web_defects.DEFECTS)}
  runs_table, stage_table, alone_table, defects_table = tables(results, stage, alone, labels, reference)
  text = runs.report("data_quality", argv, load, [
      "# Data quality: the same model and token budget on clean, defective and curated text",
      f"Ladder: the {len(documents):,} training documents of the bundled corpus (clean); the same with web "
      f"defects put in (defective: {len(mix):,} documents, {sum(label != 'clean' for label in labels):,} of them "
      f"defective); the defective mix after the curation stage (curated: data.filters={args.filters}, "
      f"data.dedup={args.dedup or 'none'}). Every run: a {args.num_layers}-layer causal LM of width {args.d_model}, "
      f"{args.steps} steps x {args.batch_size} rows x {args.seq_len} tokens, the clean documents' vocabulary, "
      "evaluated on the clean validation split (every rung's final parameters on the same uncurated rows: the "
      "curation stage filters a curated run's own validation split too, so its in-training curve, in the plot, "
      f"reads fewer rows), with the pre-training seeds {args.seeds} (the unit: a figure "
      "'a +- b' is the mean over a rung's runs and the half-width of its 95% interval). Each rung is one "
      "`pretrain sweep` over the seeds; the clean rung's:",
      "    .venv/bin/pretrain sweep " + commands["clean"],
      runs_table,
      verdict(results),
      "The count rows are n-gram models of the clean training documents in the same vocabulary "
      "(pretrain/downstream/ngram.py), on the same validation rows.",
      "The curation stage on the defective mix, rule by rule as applied (a document counts for the first rule "
      "it fails; the duplicates are the deduplication's): precision is the share of the documents a rule removed "
      "that were defective, recall the share of all defective documents that it removed.",
      stage_table,
      "What the stage removed of each kind of document:",
      defects_table,
      "Every filter rule alone on the defective mix, at its published threshold (Gopher's and C4's, set for "
      "web pages):",
      alone_table,
      "What the figures show, and what they do not. At this scale the model reads each rung's documents more "
      "than once, so a rung's validation perplexity reflects both the quality of its documents and how many "
      "distinct clean tokens it holds. The defects are simulated, with rates chosen here, not measured on a web "
      "crawl; trigram text has no detector among these heuristics (a quality classifier or a language model's "
      "perplexity would be one). Document-level rules drop a boilerplate or mojibake document whole, its clean "
      "text with it, where C4 drops lines; and a copy kept because its original went for another defect counts "
      "as defective here although its text is clean. The published thresholds were set for web pages: on "
      "documentation, several rules remove many clean documents (the last table), which is why the curated rung "
      "uses the rules that hold up on this text.",
      runs.TIMING_NOTE,
      f"![data quality]({os.path.basename(args.out)}.png)"])
  runs.write_report(args.out, lambda path: plot(results, shares, path), text, runs_table)
  return 0
