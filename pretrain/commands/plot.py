"""Draws a run's learning curves from its metrics.jsonl.

  pretrain plot --workdir=runs/quickstart [--out=PATH]

Writes WORKDIR/curves.png (or --out), panels against the step: train and
validation loss (with the validation loss of each extra eval task), validation
perplexity, gradient norm, learning rate and tokens per second. A run writes it
when it ends; this draws it at any time, also while the run trains, and from a
gs:// workdir.
"""

import sys

from pretrain import cli
from pretrain.system.errors import exit_on_user_error


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain plot") -> None:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--workdir", required=True, help="a run of pretrain train (it reads its metrics.jsonl)")
  parser.add_argument("--out", type=cli.output_file,
                      help="the image to write, .png, .pdf or .svg (default: WORKDIR/curves.png)")
  args = parser.parse_args(argv)

  from pretrain.train import metrics  # pylint: disable=g-import-not-at-top  (not for --help)

  print(metrics.plot_curves(args.workdir, args.out))


if __name__ == "__main__":
  main(sys.argv[1:])
