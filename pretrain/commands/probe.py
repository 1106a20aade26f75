"""Measures a run's model downstream, beside the same model at its initial parameters (the baseline that
pre-training must beat), on documents it never trained on (pretrain/downstream/).

  pretrain probe --workdir=runs/quickstart [--task=zero_shot]
  pretrain probe --workdir=runs/quickstart --task=same_document [--seeds=5] [--split=downstream]
  pretrain probe --workdir=runs/quickstart --task=packages [--finetune] [--seeds=3] [--finetune_lr=3e-3]

zero_shot: four tasks scored by the model's own likelihood, built once from
the bundled corpus's held-out documents (pretrain/downstream/zero_shot.py):
minimal pairs (two adjacent words swapped, a word replaced by one of the same
length and frequency, two lines exchanged: is the original more likely?
chance 0.5) and a cloze (a passage's last word among 4 words of its
document: chance 0.25). Nothing is trained, so random parameters score
chance by construction; it draws nothing (one value per task).

same_document: a linear classifier on frozen features tells whether two
passages come from the same document (chance 0.5), fitted and tested on
documents the model never trained on: the bundled corpus's downstream split
(15% of its documents, held out of pre-training), else the validation split;
a seed chooses which documents fit the probe and which pairs.

packages: which standard-library package a docstring comes from (24 ways),
a labelled task that no objective trains on; train on the corpus's train
documents, choose on its validation documents, test on its downstream
documents. A linear probe of the frozen features (it draws nothing: one
value), and with --finetune the whole model and a linear head fine-tuned for
a fixed budget (a seed draws the head and the order).

One run is one replicate: the seeds here are the probe's or fine-tuning's
own (the evaluation's noise, averaged within the run); comparing
pre-training settings takes several runs (pretrain sweep, the experiments).
Writes both rows, every value, to WORKDIR/eval/probe-TASK-stepN.json (with
--limit, --split or --documents: probe-TASK-limitN-stepN.json, ...).
"""

import json
import os
import sys

from pretrain import cli
from pretrain.config import POSITIVE
from pretrain.system import files
from pretrain.system.errors import UserError, exit_on_user_error

SEEDS, FINETUNE_STEPS = 5, 300  # Where the flags leave them out.


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain probe") -> None:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--workdir", required=True, type=cli.run_workdir, help="a run of pretrain train")
  parser.add_argument("--task", default="zero_shot", choices=("zero_shot", "same_document", "packages"),
                      help="zero_shot: minimal pairs and a cloze scored by likelihood; same_document: do two "
                           "passages share a document (linear probe); packages: which package a passage comes "
                           "from (24 classes; probe, and with --finetune fine-tuned)")
  parser.add_argument("--seeds", type=cli.at_least(1), default=None,
                      help=f"probe seeds (same_document) or fine-tuning seeds (packages --finetune); default "
                           f"{SEEDS}; the other measures draw nothing")
  parser.add_argument("--finetune", action="store_true", help="packages: also fine-tune the whole model")
  parser.add_argument("--finetune_steps", type=cli.at_least(1), default=None,
                      help=f"packages: fine-tuning steps of 32 passages (default {FINETUNE_STEPS})")
  parser.add_argument("--finetune_lr", type=cli.number(POSITIVE), default=None,
                      help="packages: the fine-tuning's peak learning rate (default: 3e-3, "
                           "pretrain/downstream/finetune.py's, chosen on a decoder-only model)")
  parser.add_argument("--split", default=None, help="same_document: whose documents (default: held out)")
  parser.add_argument("--documents", type=cli.at_least(6), default=None,
                      help="same_document: at most this many documents (default 2000)")
  parser.add_argument("--limit", type=cli.at_least(0), default=0,
                      help="zero_shot: score the first LIMIT items of each task (0: all; a quick look, as lm-eval's "
                           "--limit)")
  args = parser.parse_args(argv)
  if args.task != "packages" and args.finetune:
    raise UserError("--finetune fine-tunes on the labelled task; add --task=packages")
  if args.finetune_lr is not None and not args.finetune:
    raise UserError(f"--finetune_lr={args.finetune_lr:g} is the fine-tuning's rate; add --finetune "
                    "(and --task=packages)")
  if args.finetune_steps is not None and not args.finetune:
    raise UserError(f"--finetune_steps={args.finetune_steps} counts the fine-tuning's steps; add --finetune "
                    "(and --task=packages)")
  for flag in ("split", "documents"):
    if getattr(args, flag) is not None and args.task != "same_document":
      raise UserError(f"--{flag} chooses the same-document probe's documents; add --task=same_document, or leave "
                      "it out")
  if args.seeds is not None and not (args.task == "same_document" or args.finetune):
    raise UserError(f"--seeds: --task={args.task}{' without --finetune' if args.task == 'packages' else ''} draws "
                    "nothing (one value per measure); leave it out")
  if args.task != "zero_shot" and args.limit:
    raise UserError("--limit counts the zero-shot tasks' items; add --task=zero_shot, or leave it out")
  import jax  # pylint: disable=g-import-not-at-top  (not for --help)
  import numpy as np  # pylint: disable=g-import-not-at-top  (not for --help)
  from pretrain import run as run_lib  # pylint: disable=g-import-not-at-top  (not for --help)
  from pretrain.downstream import evaluation, stats  # pylint: disable=g-import-not-at-top  (not for --help)
  run, params, step = run_lib.load(args.workdir)
  from pretrain.downstream import likelihood  # pylint: disable=g-import-not-at-top  (not for --help)
  scorer = likelihood.Scorer(run) if args.task == "zero_shot" else None  # Compiled once, for both rows.
  rows = {}
  for name, row_params in ((f"model (step {step})", params), ("random init", run.create_state().params)):
    print(f"Probing {name} ({args.task})...", flush=True)  # Each takes a minute or two.
    rows[name] = evaluation.measure(run, row_params, args.task, args.seeds or SEEDS,
                                    args.finetune and (args.finetune_steps or FINETUNE_STEPS), args.split,
                                    scorer=scorer, limit=args.limit or None, finetune_lr=args.finetune_lr,
                                    **({"max_documents": args.documents} if args.documents else {}))
  about = next(iter(rows.values())).pop("about")
  for row in rows.values():
    row.pop("about", None)
  # A measure of part of the items or of other documents is kept apart: a sweep reads the whole one's file.
  part = "".join(f"-{flag}{getattr(args, flag)}" for flag in ("limit", "split", "documents") if getattr(args, flag))
  if jax.process_index() == 0:
    files.write_atomically(os.path.join(args.workdir, "eval", f"probe-{args.task}{part}-step{step}.json"),
                           json.dumps({"step": step, "task": args.task, **about, "rows": rows}, indent=2).encode())
  measures = list(next(iter(rows.values())))
  chance, not_scored = about.pop("chance", None), about.pop("not_scored", {})
  print(f"{args.task} ({', '.join(f'{k} {v}' for k, v in about.items())}); test accuracy of this run (where the "
        "task draws seeds: their mean +- 95% interval, the evaluation's own noise):")
  print(f"  {'':<18}" + "".join(f"{m:>24}" for m in measures))
  for name, row in rows.items():
    print(f"  {name:<18}" + "".join(f"{stats.text(row[m]):>24}" for m in measures))
  model, initial = (rows[name] for name in rows)
  print(f"  {'difference':<18}" + "".join(f"{np.mean(model[m]) - np.mean(initial[m]):>+24.3f}" for m in measures))
  if chance:
    print(f"  {'chance':<18}" + "".join(f"{chance[m]:>24.3f}" for m in measures))
  for name, why in not_scored.items():
    print(f"  {name} not scored: {why}")


if __name__ == "__main__":
  main(sys.argv[1:])
