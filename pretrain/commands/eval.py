"""Evaluates the latest checkpoint of a run on a task.

  pretrain eval --workdir=runs/quickstart --task=corpus_clm [--split=validation] [--batches=N]

  pretrain eval --workdir=runs/quickstart --task=corpus_clm --ngram=3

  pretrain eval --workdir=runs/ptb --task=ptb_clm --split=test --window=128 --stride=64

Reports the objective's validation metrics (for a token loss: loss per target
token, token accuracy, perplexity and bits per byte; for causal LM over the
whole split, also the per-word perplexity of word-level language modelling:
exp(nats / words), the words split at white space plus one end of sentence
per document, 82,430 on the Penn Treebank's test split), and writes
them to WORKDIR/eval/TASK-SPLIT-stepN.json (-batchesN before -step: part of
the split). A task is `{source}_{objective}`
over the run's data source (e.g. corpus_prefix_lm_decoder), for any objective
of the run's model family.

--window=W [--stride=S] (a causal LM): sliding windows over the split's text
(its documents in order, each with its EOS) instead of the task's rows: every
token scored once, each with at least W - S tokens of the text before it
(pretrain/downstream/sliding.py); S = W (the default) gives disjoint windows.

--ngram=N adds the reference rows a trained model must beat: count-based
n-gram models of orders 1 to N (unigram with add-one smoothing, then
interpolated modified Kneser-Ney, up to order 5) fitted on the train split in the run's vocabulary and
scored on the same split's causal-LM rows (the rows of SOURCE_clm, the
experiments' yardstick), in nats per token and bits per byte.
"""

import json
import math
import os
import sys

from pretrain import cli
from pretrain.system import files
from pretrain.system import tf_loader
from pretrain.system.errors import UserError, exit_on_user_error


def evaluate(workdir: str, task: str, split: str, max_batches: int | None = None, ngram: int = 0,
             window: int = 0, stride: int = 0) -> dict:
  """`max_batches`: at most this many batches (None: the whole split); `ngram`: also the count-based models of
  orders 1 to `ngram` (pretrain/downstream/ngram.py), under 'ngram'; `window` and `stride` (0: the window):
  sliding windows over the split's text (pretrain/downstream/sliding.py) for a causal LM."""
  import jax  # pylint: disable=g-import-not-at-top  (not for --help)
  from pretrain import objectives, run as run_lib  # pylint: disable=g-import-not-at-top  (not for --help)
  from pretrain.data import sources, tasks  # pylint: disable=g-import-not-at-top  (not for --help)
  from pretrain.train import evaluation  # pylint: disable=g-import-not-at-top  (not for --help)

  run, params, step = run_lib.load(workdir)
  members = sources.mixture_sources(run.cfg.data)
  available, unfit = {}, {}  # unfit: the tasks whose examples the run's lengths cannot hold, and why.
  if run.cfg.data.task:  # A task of the user's code: importing it registers it.
    available[tasks.user_task(run.cfg.data, run.cfg.tokenizer, run.family)[0]] = run.objective
  for spec in objectives.known(run.cfg):
    objective = spec(run.cfg.data, run.cfg.train.seed)
    if objective.family.trains_same_model(run.family):
      name = tasks.register_mixture(members, run.vocabulary, objective)
      try:
        spec.check(run.cfg)  # Its lengths and noise, at the run's data.inputs_length and targets_length.
        objectives.check_rows_fit(run.cfg, spec, "the task of")  # Rows within the trained positions.
        available[name] = objective
      except UserError as e:
        unfit[name] = e.problem  # Its fix would change the lengths, which are the run's here.
  if task in unfit:
    raise UserError(f"--task={task!r}: the run's lengths cannot hold its examples ({unfit[task]}); eval reads a "
                    f"task at the lengths the run trained on: use one of {', '.join(sorted(available))}")
  if task not in available:
    raise UserError(f"--task={task!r} is not a task this {run.family.architecture} run can be evaluated on; use one "
                    f"of {', '.join(sorted(available))}")
  missing = [source.name for source, _ in members if split not in source.splits]
  if missing:
    raise UserError(f"--split={split}: the source {missing[0]} has no such split; use one of "
                    f"{', '.join(members[0][0].splits)}")
  if window and not (available[task].scores_every_word and len(members) == 1 and not run.cfg.data.task):
    causal = [name for name, objective in available.items() if objective.scores_every_word]
    raise UserError(f"--window reads the split as one text, for a causal LM over one source: --task={task} is not "
                    "one; " + (f"use {causal[0]}, or drop --window" if causal and len(members) == 1 else
                               f"this {run.family.name} run has none to read so: drop --window"))
  with run.activated():
    if window:
      from pretrain.downstream import sliding  # pylint: disable=g-import-not-at-top  (not for --help)
      task_ = tf_loader.seqio().get_mixture_or_task(task)
      text = sliding.text_of(task_, run.task_lengths, split)
      batches = sliding.global_batches(run, text, window, stride or window)[:max_batches]
    else:
      batches = evaluation.global_batches(run, task, available[task], split, max_batches)
    totals = evaluation.sums(run.eval_step, params, batches)
  summary = {"task": task, "split": split, "step": step, "batches": len(batches),
             **({"window": window, "stride": stride or window} if window else {}),
             **run.family.eval_metrics(totals)}
  # Per-word perplexity where the loss covers every word of the split once (causal LM over one source, the whole
  # split): the count of word-level language modelling, comparable across vocabularies.
  words = (sources.words(members[0][0], split) if available[task].scores_every_word and len(members) == 1
           and not run.cfg.data.task and max_batches is None else 0)
  if words:
    summary.update(words=words, word_perplexity=math.exp(totals["cross_entropy"] / words))
  if ngram:
    from pretrain.downstream import ngram as ngram_lib  # pylint: disable=g-import-not-at-top  (not for --help)
    references = ngram_lib.reference(run, range(1, ngram + 1), max_batches, split)
    summary["ngram"] = {ngram_lib.ORDERS[order]: {**values, **({"word_perplexity": math.exp(
        values["loss"] * values["tokens"] / words)} if words else {})} for order, values in references.items()}
  if jax.process_index() == 0:
    windowed = f"-window{window}-stride{stride or window}" if window else ""
    part = f"-batches{max_batches}" if max_batches is not None else ""  # Apart from the whole split's figures.
    files.write_atomically(os.path.join(workdir, "eval", f"{task}-{split}{windowed}{part}-step{step}.json"),
                           json.dumps(summary, indent=2).encode())
  return summary


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain eval") -> None:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--workdir", required=True, type=cli.run_workdir, help="a run of pretrain train")
  parser.add_argument("--task", required=True, help="e.g. corpus_clm; an unknown name lists the valid ones")
  parser.add_argument("--split", default="validation", choices=("train", "validation", "test", "downstream"),
                      help="which split (test: the Penn Treebank's; downstream: the bundled corpus's held-out one)")
  parser.add_argument("--batches", type=cli.at_least(1), default=None,
                      help="at most this many batches (default: the whole split)")
  parser.add_argument("--ngram", type=int, choices=(0, 1, 2, 3, 4, 5), default=0,
                      help="also the count-based n-gram models of orders 1 to N (0: none)")
  parser.add_argument("--window", type=cli.at_least(1), default=0,
                      help="a causal LM: sliding windows of W tokens over the split's text (default: the task's rows)")
  parser.add_argument("--stride", type=cli.at_least(1), default=0,
                      help="with --window: tokens each window scores after the first (default: the window)")
  args = parser.parse_args(argv)
  if args.stride and not args.window:
    parser.error("--stride needs --window")
  if args.stride > args.window:  # Before the run and the split are read.
    parser.error(f"--stride={args.stride} leaves tokens unscored: at most --window={args.window}")
  s = evaluate(args.workdir, args.task, args.split, args.batches, args.ngram, args.window, args.stride)
  values = ", ".join(f"{k} {v:,}" if k == "words" else f"{k} {v:.2f}" if k.endswith("perplexity") else
                     f"{k} {v:.4f}" for k, v in s.items() if k not in ("task", "split", "step", "batches", "ngram", "window",
                                                                       "stride"))
  windows = f", windows of {s['window']} tokens scoring {s['stride']}" if "window" in s else ""
  batches = f"{s['batches']} batch{'es' * (s['batches'] != 1)}"
  print(f"{s['task']} ({s['split']}, step {s['step']}, {batches}{windows}): {values}")
  if s.get("ngram"):  # Fitted and scored on causal-LM rows, whatever the task: another task's loss is other tokens'.
    other = "" if s["task"].endswith("_clm") else (f", not {s['task']}'s: compare bits per byte only as a scale, "
                                                   "the tasks differ")
    print(f"  count-based references, scored on the split's causal-LM rows{other}:")
  for name, reference in s.get("ngram", {}).items():
    word = f", word_perplexity {reference['word_perplexity']:.2f}" if "word_perplexity" in reference else ""
    print(f"  {name:<44} loss {reference['loss']:.4f}, bits_per_byte {reference['bits_per_byte']:.4f}{word}")


if __name__ == "__main__":
  main(sys.argv[1:])
