"""Draws a run's learning curves from its metrics.jsonl, or several runs' over each other.

  pretrain plot --workdir=runs/quickstart [--out=PATH]
  pretrain plot --workdir=runs/parent --workdir=runs/cooldown --out=compare.png

Writes WORKDIR/curves.png (or --out), panels against the step: train and
validation loss (with the validation loss of each extra eval task), validation
perplexity, gradient norm, learning rate and tokens per second. A run writes it
when it ends; this draws it at any time, also while the run trains, and from a
gs:// workdir. Several --workdir flags draw their runs in one figure (a colour
per run, a line style per metric, against the step): a cooldown branch beside
its parent, two settings of a sweep; --out names its file.
"""

import sys

from pretrain import cli
from pretrain.system.errors import exit_on_user_error


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain plot") -> None:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--workdir", required=True, action="append",
                      help="a run of pretrain train (it reads its metrics.jsonl); repeat it to draw several runs")
  parser.add_argument("--out", type=cli.output_file,
                      help="the image to write, .png, .pdf or .svg (default: WORKDIR/curves.png)")
  args = parser.parse_args(argv)

  from pretrain.train import metrics  # pylint: disable=g-import-not-at-top  (not for --help)

  print(metrics.plot_curves(args.workdir[0], args.out, tuple(args.workdir[1:])))


if __name__ == "__main__":
  main(sys.argv[1:])
