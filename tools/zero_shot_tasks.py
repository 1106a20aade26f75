"""Builds the zero-shot tasks' files (pretrain/downstream/zero_shot_vN/) from the bundled corpus's downstream
documents, or checks that the shipped ones are what the builder makes.

  python tools/zero_shot_tasks.py [--check] [--out=DIR]

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
  parser.add_argument("--out", default=zero_shot.directory(), help="where to write the files")
  args = parser.parse_args(argv)
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


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
