"""Evaluates a run's checkpoint with EleutherAI's lm-evaluation-harness (the `eval` extra: pip install -e '.[eval]').

  pretrain lm-eval --workdir=DIR --tasks=A,B [--num_fewshot=K] [--limit=N] [--output=FILE] [--step=N]
      [--mode=TOKEN] [--include_path=DIR] [--batch_size=N]

The model is the run's own JAX model (pretrain/downstream/harness.py: lm-eval's `pretrain` model type), so any
run of pretrain train is evaluated, also one that has no Hugging Face export (prefix LM, UL2's mode tokens). The
project's tasks (tag `pretrain`) need no download: pretrain_pairs_swap, pretrain_pairs_replace,
pretrain_pairs_lines and pretrain_cloze (the zero-shot tasks of pretrain probe, as lm-eval's multiple choice),
pretrain_cloze_gen (the cloze's word generated) and pretrain_documents (the held-out passages' rolling
log-likelihood: bits per byte, word and byte perplexity). lm-eval's own tasks work where their data can be
downloaded; --include_path adds a directory of task YAMLs (e.g. local JSON data: dataset_path: json,
dataset_kwargs: {data_files: ...}). --mode names a UL2 run's mode token, e.g. [S2S] (an encoder-decoder's,
or a prefix-LM decoder's).

Writes lm-eval's results JSON to WORKDIR/eval/lm_eval-stepN.json (or --output) and prints its table.
"""

import json
import os
import sys
import uuid

from pretrain import cli
from pretrain.config import Valid
from pretrain.downstream.lm_eval_loader import load
from pretrain.system import files
from pretrain.system.errors import UserError, exit_on_user_error

# lm-eval's --limit: documents of each task, or a share of them below 1.
DOCUMENTS = Valid(lambda v: 0 < v < 1 or (v >= 1 and v == int(v)),
                  "a number of documents (1, 2, ...) or a fraction of them in (0, 1)")


def _check_writable(path: str, flag: str) -> None:
  """Refuses a results file whose directory cannot be written now, not after the evaluation: a file is made there
  and removed (its missing folders are made)."""
  directory = os.path.dirname(os.path.abspath(path) if files.local(path) else path)
  probe = os.path.join(directory, f".writable-{uuid.uuid4().hex}")
  try:
    files.makedirs(directory)
    with files.open_file(probe, "wb"):
      pass
    files.remove(probe)
  except files.errors() as e:
    raise UserError(f"{flag} cannot be written in {directory} ({files.reason(e)}); give an --output in a writable "
                    "directory") from None


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain lm-eval") -> None:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--workdir", required=True, type=cli.run_workdir, help="a run of pretrain train")
  parser.add_argument("--tasks", required=True, help="comma-separated lm-eval task, group or tag names (pretrain: "
                                                      "the project's)")
  parser.add_argument("--num_fewshot", type=cli.at_least(0), default=None, help="examples in each prompt")
  parser.add_argument("--limit", type=cli.number(DOCUMENTS), default=None,
                      help="at most this many documents of each task (or a fraction, below 1)")
  parser.add_argument("--output", type=cli.output_file, default=None,
                      help="the results JSON (default WORKDIR/eval/lm_eval-stepN.json)")
  parser.add_argument("--step", type=cli.at_least(0), default=None, help="a checkpoint's step (default: the latest)")
  parser.add_argument("--mode", default=None, help="a UL2 run's mode token before each context, e.g. [S2S]")
  parser.add_argument("--include_path", default=None, help="a directory of more task YAMLs")
  parser.add_argument("--batch_size", type=cli.at_least(1), default=None, help="rows per scoring batch")
  parser.add_argument("--dropless", action="store_true", help="a mixture of experts trained with capacity dispatch "
                                                              "routes every token, as its Hugging Face export does")
  args = parser.parse_args(argv)
  tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
  if not tasks:
    raise UserError("--tasks names no task; give e.g. --tasks=pretrain")
  # Part of each task's documents is kept apart (as probe's and eval's): the whole measure's file stays.
  part = f"-limit{args.limit:g}" if args.limit else ""
  default = os.path.join(args.workdir, "eval", f"lm_eval{part}-stepN.json")
  _check_writable(args.output or default, f"--output={args.output}" if args.output else f"the results ({default})")
  harness = load()
  results = harness.evaluate(args.workdir, tasks, args.num_fewshot, args.limit, args.step, args.mode,
                             args.include_path, args.batch_size, dropless=args.dropless, verbose=args.verbose)
  from lm_eval import utils as lm_utils  # pylint: disable=g-import-not-at-top  (the eval extra)
  step = results["config"].get("model_step")
  path = args.output or os.path.join(args.workdir, "eval", f"lm_eval{part}-step{step}.json")
  files.write_atomically(path, json.dumps(results, indent=2, default=lm_utils.handle_non_serializable).encode())
  print(lm_utils.make_table(results))
  print(f"Wrote {path}")


if __name__ == "__main__":
  main(sys.argv[1:])
