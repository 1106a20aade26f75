"""Prints what the curation stage (data.filters, data.dedup) removes from a config's source: counts per rule and
examples of removed documents.

  pretrain inspect-data --config.data.filters=gopher --config.data.dedup=near [--split=train] [--num=2] \
      [--rule=NAME] [--chars=300]

Counts are of documents and of their tokens in the run's vocabulary (trained
on the kept documents on first use, as training would). The decisions are
taken once per source and setting and cached (data.cache_dir); training reads
the same ones.
"""

import itertools
import sys

from pretrain import cli
from pretrain.system.errors import UserError, exit_on_user_error


def table(report: dict, split: str) -> list[str]:
  """The rows of one split's counts: each reason's documents, their share of the split, and tokens."""
  counts = report[split]
  total = counts["documents"]
  lines = [f"{split}: {total:,} documents, {counts['kept']:,} kept ({counts['kept'] / max(total, 1):.1%})",
           f"  {'removed by':<24}{'documents':>10}{'share':>8}{'tokens':>12}"]
  for reason, removed in counts["removed"].items():
    lines.append(f"  {reason:<24}{removed['documents']:>10,}{removed['documents'] / max(total, 1):>8.1%}"
                 f"{removed.get('tokens', 0):>12,}")
  return lines


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain inspect-data") -> None:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--split", default="train", choices=("train", "validation"), help="whose examples to print")
  parser.add_argument("--num", type=cli.at_least(0), default=2, help="examples of removed documents per rule (0: none)")
  parser.add_argument("--rule", default="", help="print examples of this rule only")
  parser.add_argument("--chars", type=cli.at_least(1), default=300, help="characters of each example to print")
  args, cfg = cli.parse_command_line(parser, argv)
  from pretrain import run as run_lib  # pylint: disable=g-import-not-at-top  (imports TF)
  from pretrain.data import curation  # pylint: disable=g-import-not-at-top  (not for --help)
  if not curation.enabled(cfg.data):
    raise UserError("no curation stage is set: give --config.data.filters (e.g. gopher,c4) or "
                    "--config.data.dedup (exact or near)")
  run = run_lib.Run.build_with_data(cfg)
  for source in {source.name: source for source in run.sources}.values():  # Schedule members may share one.
    stage = source.curation
    if args.rule and args.rule not in stage.reasons[1:]:
      raise UserError(f"--rule={args.rule!r} is not a rule of this stage; its rules are {', '.join(stage.reasons[1:])}")
    report = stage.report(run.vocabulary)
    print(f"{source.name}: filters {', '.join(f.name for f in stage.filters) or 'none'}; dedup {stage.dedup or 'none'}"
          + (f" (Jaccard >= {stage.threshold})" if stage.dedup == "near" else ""))
    for split in ("train", "validation"):
      print("\n".join(table(report, split)))
    by_rule = {}
    for reason, text in stage.removed(args.split) if args.num > 0 else ():
      if (not args.rule or reason == args.rule) and len(by_rule.setdefault(reason, [])) < args.num:
        by_rule[reason].append(text)
    for reason, texts in by_rule.items():
      print(f"\nRemoved by {reason} ({args.split}):")
      for text in itertools.islice(texts, args.num):
        cut = text[:args.chars].replace("\n", " / ")
        print(f"  - {cut}{' ...' if len(text) > args.chars else ''}")


if __name__ == "__main__":
  main(sys.argv[1:])
