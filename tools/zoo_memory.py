"""Does each zoo config fit the hardware it says it is sized for? `pretrain estimate-memory` of every zoo config
on its SIZED_FOR devices (configs/_zoo.py), compiled, against the memory of one device and the figure the config
records. Prints a markdown table (tools/zoo_memory.md keeps the last one).

  python tools/zoo_memory.py [--configs=lm_125m,t5_1_1_small] [--timeout=900]

Each config compiles its train step for that many CPU devices: seconds for the small ones, many minutes for the
largest meshes on a laptop. Exits 1 when a config does not fit or its recorded figure is off by more than 10%.
"""

import argparse
import importlib
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from pretrain import configs  # pylint: disable=wrong-import-position


def sized_for(name: str):
  return importlib.import_module(f"pretrain.configs.{name}").SIZED_FOR


def zoo() -> list[str]:
  """The configs that declare the hardware they are sized for."""
  return [name for name in configs.names() if hasattr(importlib.import_module(f"pretrain.configs.{name}"),
                                                       "SIZED_FOR")]


def command(name: str) -> list[str]:
  s = sized_for(name)
  return [sys.executable, "-m", "pretrain", "estimate-memory", f"--devices={s.devices}", f"--config={name}",
          "--config.model.dtype=bfloat16", *s.flags]


def estimate_gib(name: str, timeout: float) -> float | None:
  """estimate-memory's total per device in GiB; None when it did not finish in `timeout` seconds."""
  try:
    result = subprocess.run(command(name), cwd=REPO, capture_output=True, text=True, timeout=timeout)
  except subprocess.TimeoutExpired:
    return None
  if result.returncode:
    raise SystemExit(f"{' '.join(command(name))} failed:\n{result.stderr[-2000:]}")
  total = re.search(r"^\s+total\s+([\d,.]+) (GiB|MiB)", result.stdout, re.M)
  return float(total[1].replace(",", "")) / (1024 if total[2] == "MiB" else 1)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--configs", default="", help="comma-separated zoo configs (default: all)")
  parser.add_argument("--timeout", type=float, default=900, help="seconds per config")
  args = parser.parse_args()
  names = args.configs.split(",") if args.configs else zoo()
  print("| config | sized for | devices | estimate-memory (GiB per device) | recorded | device (GiB) | fits | "
        "seconds |")
  print("| --- | --- | ---: | ---: | ---: | ---: | --- | ---: |")
  failed = False
  for name in names:
    s, start = sized_for(name), time.time()
    measured = estimate_gib(name, args.timeout)
    seconds = time.time() - start
    if measured is None:
      print(f"| {name} | {s.hardware} | {s.devices} | not measured (over {args.timeout:.0f} s) | {s.estimate_gib} | "
            f"{s.device_gib} | | {seconds:.0f} |", flush=True)
      continue
    fits = measured <= s.device_gib
    failed |= not fits or abs(measured - s.estimate_gib) > 0.1 * s.estimate_gib
    print(f"| {name} | {s.hardware} | {s.devices} | {measured:.1f} | {s.estimate_gib} | {s.device_gib} | "
          f"{'yes' if fits else '**no**'} | {seconds:.0f} |", flush=True)
  sys.exit(1 if failed else 0)


if __name__ == "__main__":
  main()
