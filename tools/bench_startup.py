"""How long each `pretrain` command takes as a user starts it, beside another checkout of the project.

  python tools/bench_startup.py [--baseline=DIR] [--runs=5]

Times whole processes (`python -m pretrain ...`, wall seconds, start to exit) for cheap invocations of every
command: its --help, a flag or config error, and a short real call on a tiny trained run (made first, in a
temporary directory). With --baseline (another checkout, e.g. `git worktree add /tmp/base <commit>`), each
command runs there and here in turn, A B A B, and the table gives both medians and their ratio, pair by pair,
so that a drifting machine does not move it. Run it with nothing else running. Notes: tools/bench_startup.md.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--config.model.d_model=32", "--config.model.num_layers=1", "--config.model.num_heads=2",
        "--config.model.num_kv_heads=2", "--config.model.head_dim=16", "--config.model.mlp_dim=64",
        "--config.data.seq_len=32", "--config.train.batch_size=4", "--config.train.eval_batches=2",
        "--config.sample.num=0"]


def commands(run: str, scratch: str) -> dict[str, list[str]]:
  return {
      "pretrain --help": ["--help"],
      "train --help": ["train", "--help"],
      "train, a config error": ["train", f"--workdir={scratch}/x", "--config.train.steps=abc"],
      "train, an objective error": ["train", f"--workdir={scratch}/x", "--config.data.objective=ul2",
                                    "--config.data.targets_length=4"],
      "generate, 4 tokens": ["generate", f"--workdir={run}", "--prompt=Return the", "--max_new_tokens=4"],
      "generate, no run": ["generate", f"--workdir={scratch}/none", "--prompt=a"],
      "export": ["export", f"--workdir={run}", f"--out={scratch}/export-{{i}}"],
      "plot": ["plot", f"--workdir={run}", f"--out={scratch}/curves.png"],
      "estimate-memory --no_compile": ["estimate-memory", "--no_compile", *TINY],
      "eval, 1 batch": ["eval", f"--workdir={run}", "--task=corpus_clm", "--batches=1"],
      "inspect-task, 1 example": ["inspect-task", "--task=corpus_clm", "--num=1", *TINY],
  }


def timed(repo: str, argv: list[str]) -> float:
  start = time.perf_counter()
  subprocess.run([sys.executable, "-m", "pretrain", *argv], cwd=repo, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL, env={k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"})
  return time.perf_counter() - start


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--baseline", help="another checkout of the project, timed beside this one")
  parser.add_argument("--runs", type=int, default=5, help="timed runs of each command (after one untimed)")
  args = parser.parse_args()
  with tempfile.TemporaryDirectory() as scratch:
    run = os.path.join(scratch, "run")
    subprocess.run([sys.executable, "-m", "pretrain", "train", f"--workdir={run}", *TINY, "--config.train.steps=2"],
                   cwd=HERE, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sides = {"this": HERE, **({"baseline": args.baseline} if args.baseline else {})}
    print("| command | " + " | ".join(f"{side} (s, median)" for side in sides)
          + (" | this / baseline |" if args.baseline else " |"))
    print("| --- |" + " ---: |" * (len(sides) + (1 if args.baseline else 0)))
    count = 0
    for name, argv in commands(run, scratch).items():
      times = {side: [] for side in sides}
      for i in range(args.runs + 1):
        for side, repo in sides.items():
          count += 1
          seconds = timed(repo, [a.replace("{i}", str(count)) for a in argv])
          if i:  # The first of each is a warm-up (file caches).
            times[side].append(seconds)
      row = [f"{statistics.median(t):.2f}" for t in times.values()]
      if args.baseline:
        row.append(f"{statistics.median(a / b for a, b in zip(times['this'], times['baseline'])):.2f}")
      print(f"| {name} | " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
  main()
