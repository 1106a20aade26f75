"""Measures how useful a run's representations are downstream: a linear probe on frozen features that tells
whether two passages come from the same document (pretrain/train/probe.py).

  pretrain probe --workdir=runs/quickstart [--split=train] [--documents=2000] [--seed=0] [--random_init]

Passages come from the run's training split by default: the bundled corpus
holds about 110 validation documents, too few for a stable figure (the test
accuracy moves by +-5 points between seeds there, against under 1 point on
the 1,700 usable training documents). The probe's own train and test pairs
come from different documents either way; --split=validation reads documents
the model never trained on. Prints the test accuracy (chance 0.5) and writes
it with the train accuracy, the chosen L2 weight and the counts to
WORKDIR/eval/probe-stepN.json. --random_init probes the same architecture at
its initial parameters instead: the baseline that pre-training should beat.
"""

import json
import os
import sys

from pretrain import cli
from pretrain.errors import UserError, exit_on_user_error


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain probe") -> None:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--workdir", required=True, help="a run of pretrain train")
  parser.add_argument("--split", default="train", choices=("train", "validation"), help="whose documents")
  parser.add_argument("--documents", type=int, default=2000, help="at most this many documents")
  parser.add_argument("--seed", type=int, default=0, help="which pairs, and which documents test the probe")
  parser.add_argument("--random_init", action="store_true", help="probe the initial parameters (the baseline)")
  args = parser.parse_args(argv)
  if args.documents < 6:
    raise UserError(f"--documents={args.documents}: the probe needs at least 6")
  import jax  # pylint: disable=g-import-not-at-top
  from pretrain import files, run as run_lib  # pylint: disable=g-import-not-at-top
  from pretrain.train import probe  # pylint: disable=g-import-not-at-top
  run, params, step = run_lib.load(args.workdir)
  if args.random_init:
    params, step = run.create_state().params, 0
  result = {"step": step, "split": args.split, **probe.probe_run(run, params, args.split, args.documents, args.seed)}
  if jax.process_index() == 0:
    name = "probe-random-init.json" if args.random_init else f"probe-step{step}.json"
    files.write_atomically(os.path.join(args.workdir, "eval", name), json.dumps(result, indent=2).encode())
  print(f"Same-document probe at step {step}: test accuracy {result['accuracy']:.3f} (chance 0.5) on "
        f"{result['test_pairs']} pairs; train accuracy {result['train_accuracy']:.3f}; "
        f"{result['documents']} documents")


if __name__ == "__main__":
  main(sys.argv[1:])
