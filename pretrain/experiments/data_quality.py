"""How does data quality affect pre-training? Trains one model on each rung of a quality ladder, at the same token
budget, and scores the curation stage's filters against known defects.

  python tools/data_quality.py [--steps=300] [--batch_size=16] [--seq_len=128] [--d_model=128] [--num_layers=2]
      [--filters=SPEC] [--dedup=near] [--seed=0] [--documents=N] [--out=docs/data_quality]
      [--out_dir=runs/data_quality]
      [--config.KEY=VALUE ...]

The ladder is built from the training documents of the config's source (the bundled corpus by default):
  clean       the documents as they are;
  defective   the same documents with the defects of web text put in (pretrain/experiments/web_defects.py:
              boilerplate and navigation lines, repeated paragraphs, mojibake, exact and near copies, keyword
              spam, truncated fragments, trigram-generated text), each document labelled with its defect;
  curated     the defective mix after the curation stage (--filters, --dedup; pretrain/data/curation.py).
Every rung trains the same causal-LM model from scratch (same seed, optimizer, schedule, vocabulary: the one
of the clean documents) for the same steps x batch x seq_len tokens, and is evaluated on the source's clean
validation split. The labels score each filter: precision (the share of the documents it removed that were
defective) and recall (the share of the defective documents it removed), as the stage applied it (a document
counts for the first rule it fails) and for every rule alone at its published threshold.

Writes OUT.md (the command, machine, date and tables, also printed) and OUT.png (validation loss of each rung
against the step, and the share of each defect that the stage removed). The data go to OUT_DIR/data, each
run's workdir and train.log to OUT_DIR/RUNG.
"""

import collections
import itertools
import json
import math
import os

from pretrain import cli
from pretrain.errors import UserError, exit_on_user_error
from pretrain.experiments import runs, web_defects

# Filters for documentation text: Gopher's word count rule at 50 words would remove a third of the clean
# docstrings (their median is 59 words), and C4's sentence and punctuation rules most of them
# (docs/data_quality.md scores every rule alone); these keep the rules that hold up on clean documentation.
DEFAULT_FILTERS = "words=30:100000,stop_words,duplicate_lines,duplicate_paragraphs,boilerplate=0,encoding_errors"
RUNGS = ("clean", "defective", "curated")


def write_jsonl(path: str, rows) -> None:
  with open(path, "w", encoding="utf-8") as f:
    for row in rows:
      f.write(json.dumps(row) + "\n")


def rung_config(base, rung: str, data_dir: str, vocabulary_path: str, args):
  """The config of one rung's run: files of the rung, the clean validation split, the shared model and budget."""
  cfg = base.copy_and_resolve_references()
  c = cfg.data
  c.source, c.objective, c.mixture, c.seq_len = "files", "clm", (), args.seq_len
  c.train_files = os.path.join(data_dir, "clean.jsonl" if rung == "clean" else "defective.jsonl")
  c.validation_files = os.path.join(data_dir, "validation.jsonl")
  c.filters, c.dedup = (args.filters, args.dedup) if rung == "curated" else ("", "")
  c.dedup_threshold = args.dedup_threshold
  c.eval_objectives = ()
  cfg.tokenizer.path = vocabulary_path
  runs.set_budget(cfg, args.steps, args.batch_size, args.evals)
  runs.set_model(cfg, args.d_model, args.num_layers, args.head_dim)
  return cfg


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
  from pretrain.data import filters  # pylint: disable=g-import-not-at-top
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


def tables(results: list[dict], stage: dict, alone: dict, labels: list[str]) -> list[str]:
  clean_total = sum(label == "clean" for label in labels)
  counts = collections.Counter(labels)
  runs_table = ["| rung | training documents | defective share | training tokens | validation loss (step 0) "
                "| validation perplexity | tokens/s |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
  for r in results:
    runs_table.append(f"| {r['rung']} | {r['documents']:,} | {r['defective_share']:.1%} | {r['tokens']:,} | "
                      f"{r['loss']:.3f} ({r['initial_loss']:.2f}) | {math.exp(r['loss']):.1f} | "
                      f"{r['tokens_per_second']:,.0f} |")
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


def plot(results: list[dict], shares: dict, path: str) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, (curves, bars) = plt.subplots(1, 2, figsize=(13, 4.8))
  for r in results:
    curves.plot(*zip(*r["curve"]), "o-", markersize=3, label=f"{r['rung']} ({r['documents']:,} documents)")
  curves.set_title("validation loss on the clean validation split, same token budget", fontsize=9)
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
  fig.savefig(path, dpi=100, bbox_inches="tight")
  plt.close(fig)


@exit_on_user_error
def main(argv: list[str], prog: str = "tools/data_quality.py") -> int:
  parser = cli.parser_for(prog, __doc__)
  runs.add_flags(parser, "data_quality", "tokens per row", "RUNG")
  parser.add_argument("--d_model", type=int, default=128, help="model width")
  parser.add_argument("--num_layers", type=int, default=2, help="layers")
  parser.add_argument("--head_dim", type=int, default=64, help="dimension of each attention head")
  parser.add_argument("--filters", default=DEFAULT_FILTERS, help="data.filters of the curated rung")
  parser.add_argument("--dedup", default="near", help="data.dedup of the curated rung")
  parser.add_argument("--dedup_threshold", type=float, default=0.8, help="data.dedup_threshold of the curated rung")
  parser.add_argument("--seed", type=int, default=0, help="where the defects go")
  parser.add_argument("--documents", type=int, default=0, help="build the ladder from the first N training "
                      "documents (0: all)")
  args, base = cli.parse_command_line(parser, argv)
  from pretrain import config as config_lib, objectives, run as run_lib  # pylint: disable=g-import-not-at-top
  from pretrain.data import filters, sources, token_store, vocab  # pylint: disable=g-import-not-at-top
  filters.parse(args.filters)  # A bad spec fails now, not after the first runs.
  if args.dedup not in ("", "exact", "near"):
    raise UserError(f"--dedup={args.dedup!r}: give exact, near or ''")

  source = sources.make_source(base.data)
  documents = list(itertools.islice(source.texts("train"), args.documents or None))
  if len(documents) < 20:
    raise UserError(f"the source holds {len(documents)} training documents; the ladder needs at least 20")
  # Of the clean documents, shared by every rung.
  vocabulary = vocab.get_vocabulary(base, source, objectives.pieces(base))
  mix = web_defects.inject(documents, args.seed)
  texts, labels = [t for t, _ in mix], [label for _, label in mix]
  data_dir = os.path.join(args.out_dir, "data")
  os.makedirs(data_dir, exist_ok=True)
  write_jsonl(os.path.join(data_dir, "clean.jsonl"), ({"text": t} for t in documents))
  write_jsonl(os.path.join(data_dir, "defective.jsonl"), ({"text": t, "defect": d} for t, d in mix))
  write_jsonl(os.path.join(data_dir, "validation.jsonl"), ({"text": t} for t in source.texts("validation")))

  configs = {rung: rung_config(base, rung, data_dir, vocabulary.file, args) for rung in RUNGS}
  for cfg in configs.values():
    config_lib.validate(cfg)
  curated = sources.make_source(configs["curated"].data).curation
  reasons = curated.reasons
  removed = [reasons[c] if c else None for c in curated.decisions()["train"]]
  stage = score(removed, labels)
  load = runs.machine()
  print(f"Ladder of {len(documents):,} clean documents: {len(mix):,} in the defective mix "
        f"({sum(label != 'clean' for label in labels) / len(mix):.1%} defective), {removed.count(None):,} kept "
        f"by the stage; 3 runs of {args.steps} steps x {args.batch_size} x {args.seq_len} tokens; {load}", flush=True)
  kept = {"clean": ["clean"] * len(documents), "defective": labels,
          "curated": [label for label, r in zip(labels, removed) if r is None]}
  results = []
  for rung in RUNGS:
    r = runs.train_one(configs[rung], os.path.join(args.out_dir, rung))
    run = run_lib.Run.build_with_data(configs[rung])
    (task, rung_source, _), = run.member_tasks()  # Its token store, built by the run: the tokens it trained on.
    store = token_store.open_or_build(task, rung_source, "train", run.vocabulary, sources.cache_dir(run.cfg.data))
    r.update(rung=rung, documents=len(kept[rung]), tokens=int(store.meta["tokens"]),
             defective_share=sum(label != "clean" for label in kept[rung]) / len(kept[rung]))
    results.append(r)
    print(f"[{len(results)}/3] {rung:<10} {r['documents']:>6,} documents  val loss {r['loss']:.3f} (perplexity "
          f"{math.exp(r['loss']):.1f})  {r['tokens_per_second']:>6,.0f} tokens/s  {r['wall']:.0f} s", flush=True)
  alone = rules_alone(texts, labels)
  counts = collections.Counter(labels)
  removed_by_defect = collections.Counter(label for s in stage.values() for label in s["defects"].elements())
  shares = {d: removed_by_defect[d] / max(counts[d], 1) for d in ("clean", *web_defects.DEFECTS)}
  runs_table, stage_table, alone_table, defects_table = tables(results, stage, alone, labels)
  text = runs.report("tools/data_quality.py", argv, load, [
      "# Data quality: the same model and token budget on clean, defective and curated text",
      f"Ladder: the {len(documents):,} training documents of the bundled corpus (clean); the same with web "
      f"defects put in (defective: {len(mix):,} documents, {sum(label != 'clean' for label in labels):,} of them "
      f"defective); the defective mix after the curation stage (curated: data.filters={args.filters}, "
      f"data.dedup={args.dedup or 'none'}). Every run: a {args.num_layers}-layer causal LM of width {args.d_model}, "
      f"{args.steps} steps x {args.batch_size} rows x {args.seq_len} tokens, the clean documents' vocabulary, "
      "evaluated on the clean validation split.",
      runs_table,
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
      "as defective here although its text is clean. The published thresholds were set for web pages: on documentation, several "
      "rules remove many clean documents (the last table), which is why the curated rung uses the rules that "
      "hold up on this text.",
      runs.TIMING_NOTE,
      f"![data quality]({os.path.basename(args.out)}.png)"])
  runs.write_report(args.out, lambda path: plot(results, shares, path), text, runs_table)
  return 0
