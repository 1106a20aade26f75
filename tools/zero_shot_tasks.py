"""Builds the zero-shot tasks' files (pretrain/downstream/zero_shot_vN/) from the bundled corpus's downstream
documents, or checks that the shipped ones are what the builder makes.

  python tools/zero_shot_tasks.py [--check] [--out=DIR]
  python tools/zero_shot_tasks.py --leak [--out=DIR] [--split_by=cluster or document]

--leak measures how much of the held-out text the train split holds (zero_shot.leak): the files in --out
against the corpus's splits, or with --split_by=document against the splits of corpus 1.1.0 (each document by
its own hash), the corpus zero_shot_v1 was built from.

The build is deterministic: the same corpus (the same CPython's documentation) gives the same bytes. A change of
the builder or of the corpus that changes the files needs a new zero_shot.VERSION, so that numbers measured on
one version are never compared with another's.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from pretrain.downstream import zero_shot  # pylint: disable=g-import-not-at-top


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--check", action="store_true", help="compare with the shipped files; write nothing")
  parser.add_argument("--out", default=zero_shot.directory(), help="where to write (or check, or measure) the files")
  parser.add_argument("--leak", action="store_true", help="measure the files' overlap with the train split")
  parser.add_argument("--split_by", choices=("cluster", "document"), default="cluster",
                      help="--leak: the corpus's splits (cluster) or corpus 1.1.0's (document)")
  args = parser.parse_args(argv)
  if args.leak:
    return _leak(args.out, clustered=args.split_by == "cluster")
  built = zero_shot.files(zero_shot.from_corpus())
  if args.check:
    differ = [name for name, content in built.items()
              if not os.path.exists(os.path.join(args.out, name))
              or open(os.path.join(args.out, name), "rb").read() != content]
    print(f"{'differ' if differ else 'unchanged'}: {', '.join(differ) or ', '.join(built)}")
    return 1 if differ else 0
  os.makedirs(args.out, exist_ok=True)
  for name, content in built.items():
    with open(os.path.join(args.out, name), "wb") as f:
      f.write(content)
  print(f"Wrote {', '.join(built)} to {args.out}")
  return 0


def _leak(where: str, clustered: bool) -> int:
  from pretrain.data import corpus  # pylint: disable=g-import-not-at-top  (the data stack)
  documents = corpus.documents()
  split = corpus.assign(documents, clustered=clustered)
  found = zero_shot.leak(where, {name: [t for t, s in zip(documents, split) if s == name] for name in corpus.SPLITS})
  print(f"{where} against the {'clustered' if clustered else 'per-document'} splits:")
  print(f"  downstream 13-word shingles in train: {found['downstream_shingles_in_train']:.1%}")
  for name in ("validation", "downstream"):
    counts = found[name]
    print(f"  {name} documents with >= 50% / >= 80% of their shingles in train: {counts['half_in_train']} / "
          f"{counts['80%_in_train']} of {counts['documents']}")
  for name, counts in found["tasks"].items():
    print(f"  {name}: correct text verbatim in train: {counts['verbatim_in_train']} of {counts['items']}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
