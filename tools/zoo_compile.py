"""The zoo on its TPU slices: `pretrain compile` of every zoo config for the slice its SIZED_FOR names
(configs/_zoo.py), beside the CPU estimate the config records. Prints a markdown table (docs/guide/scale.md keeps
the last one; tools/zoo_compile.md says how it ran). Needs libtpu: pip install -e '.[tpu]'.

  python tools/zoo_compile.py [--configs=lm_7b,ul2_20b] [--timeout=1200]

Each row is the real train step as the slice would run it (auto attention: splash where it applies; bfloat16
activations), compiled by libtpu on this machine. Exits 1 when a config does not fit its slice, or when its
figure is off the one its SIZED_FOR records (tpu_gib) by more than 10%.
"""

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from pretrain import configs  # pylint: disable=wrong-import-position


def sized_for(name: str):
  return getattr(importlib.import_module(f"pretrain.configs.{name}"), "SIZED_FOR", None)


def command(name: str, out: str) -> list[str]:
  return [sys.executable, "-m", "pretrain", "compile", f"--topology={sized_for(name).tpu}", f"--config={name}",
          f"--json={out}"]


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--configs", default="", help="comma-separated zoo configs (default: every one with a slice)")
  parser.add_argument("--timeout", type=float, default=1200, help="seconds per config")
  parser.add_argument("--json_dir", default="", help="also keep each config's figures here, as CONFIG.json "
                      "(pretrain compile --json)")
  args = parser.parse_args()
  if args.json_dir:
    os.makedirs(args.json_dir, exist_ok=True)
  names = args.configs.split(",") if args.configs else [n for n in configs.names() if sized_for(n)
                                                         and sized_for(n).tpu]
  print("| config | slice | mesh | attention | compiled GiB per device | HBM GiB | fits | CPU estimate GiB "
        "(its hardware) | compiler / formula FLOPs | roofline ms (bound) | MFU at most | compile s |")
  print("| --- | --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
  failed = False
  for name in names:
    s = sized_for(name)
    with tempfile.TemporaryDirectory() as tmp:
      out, start = os.path.join(args.json_dir or tmp, f"{name}.json"), time.time()
      try:
        result = subprocess.run(command(name, out), cwd=REPO, capture_output=True, text=True, timeout=args.timeout)
      except subprocess.TimeoutExpired:
        print(f"| {name} | {s.tpu} | | | not compiled in {args.timeout:.0f} s | | | {s.estimate_gib} | | | | |",
              flush=True)
        continue
      facts = {}
      if os.path.exists(out):
        with open(out) as f:
          facts = json.load(f)
      if "total" not in facts:  # Not compiled: an error, or XLA's refusal for memory (its JSON: fits false).
        failed = True
        error = (result.stderr.strip().splitlines() or ["no output"])[-1].replace("|", "/")[:200]
        print(f"| {name} | {s.tpu} | | | {error} | | **no** | {s.estimate_gib} ({s.hardware}) | | | | "
              f"{time.time() - start:.0f} |", flush=True)
        continue
    failed |= not facts["fits"] or abs(facts["total"] / 2**30 - s.tpu_gib) > 0.1 * s.tpu_gib
    mesh = " x ".join(f"{axis} {size}" for axis, size in facts["mesh"].items() if size > 1)
    bound = facts["roofline"]
    print(f"| {name} | {s.tpu} | {mesh} | {', '.join(facts['attention'])} | {facts['total'] / 2**30:.1f} | "
          f"{facts['hbm'] / 2**30:.0f} | {'yes' if facts['fits'] else '**no**'} | {s.estimate_gib} ({s.hardware}) | "
          f"{facts['flops_ratio']:.2f} | {bound['step_s'] * 1e3:.0f} ({bound['limit']}) | {facts['mfu_bound']:.0%} | "
          f"{facts['compile_seconds']:.0f} |", flush=True)
  sys.exit(1 if failed else 0)


if __name__ == "__main__":
  main()
