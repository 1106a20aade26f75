"""Runs one of the experiments (pretrain/experiments/), each a comparison of pre-training runs over seeds that
writes its table, verdicts and plot:

  pretrain experiment NAME [its flags]     (pretrain experiment NAME --help: its flags)

An experiment starts as every subcommand does: quietly (TensorFlow's and XLA's native lines only with --verbose),
libtpu and the CUDA plugin kept off the CPU run.
"""

import difflib
import importlib
import sys

from pretrain import cli
from pretrain.system.errors import UserError, exit_on_user_error

# name: what it asks (pretrain/experiments/NAME.py; its page in docs/ says how it ran).
EXPERIMENTS = {
    "compare_objectives": "which objective? (CLM, MLM, span corruption, UL2, ... at equal compute)",
    "compare_tokenizers": "which tokenizer? (kinds and sizes, per-byte loss)",
    "compare_moe": "dense or mixture of experts, at equal active compute?",
    "curriculum": "which curriculum? (mixtures and schedules over the steps)",
    "data_quality": "what filtering and deduplication do to the model",
    "cooldown_check": "does a cooldown from a stable run reach a fresh cosine run?",
    "mup_transfer": "does the best learning rate hold still across widths?",
    "scaling": "how big a model for a compute budget? (isoFLOP curves, a fitted law)",
    "ptb": "Penn Treebank: the published numbers reproduced",
    "exercises": "the seed's exercises, each a pretrain sweep",
}


def listing() -> str:
  width = max(map(len, EXPERIMENTS))
  return "experiments (NAME):\n" + "\n".join(f"  {name:<{width}}  {what}" for name, what in EXPERIMENTS.items())


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain experiment") -> int:
  if argv and not argv[0].startswith("-"):  # The experiment's own flags, --help among them, are its parser's.
    name, rest = argv[0], argv[1:]
    if name not in EXPERIMENTS:
      close = difflib.get_close_matches(name, EXPERIMENTS, n=1)
      hint = f"did you mean {close[0]!r}? " if close else ""
      raise UserError(f"unknown experiment {name!r}; {hint}the experiments are {', '.join(EXPERIMENTS)}")
    module = importlib.import_module(f"pretrain.experiments.{name}")
    return module.main(rest, prog=f"{prog} {name}") or 0
  parser = cli.parser_for(prog, f"{__doc__}\n{listing()}")
  parser.add_argument("name", choices=EXPERIMENTS, metavar="NAME", help="the experiment (listed above)")
  parser.parse_args(argv)  # --help, or the error of a missing NAME.
  return 2


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
