"""Requests per second of lm-eval's `pretrain` model type against lm-eval's own `hf` backend on the run's Hugging
Face export, on this machine's CPU: each task run by one backend, then the other, --repeats times, the medians
compared (notes: tools/bench_lm_eval.md).

  python tools/bench_lm_eval.py --workdir=runs/quickstart [--tasks=pretrain_cloze,pretrain_documents,...]
      [--limit=50] [--repeats=2] [--batch_size=32]

Both backends score in float32 with batches of --batch_size requests (the hf backend with add_bos_token=True,
which it needs to read the run's rows as they were trained); a request is one lm-eval request (a choice of a
multiple-choice document, a rolling document, a generation). Compilation (the pretrain backend's, once per
shape) and model loading fall in the first repeat; the median of the others is the steady state.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--workdir", required=True, help="a run of pretrain train")
  parser.add_argument("--tasks", default="pretrain_cloze,pretrain_documents,pretrain_cloze_gen",
                      help="comma-separated lm-eval tasks")
  parser.add_argument("--limit", type=int, default=50, help="documents of each task")
  parser.add_argument("--repeats", type=int, default=3, help="runs of each task by each backend (at least 2)")
  parser.add_argument("--batch_size", type=int, default=32, help="requests per batch, both backends")
  args = parser.parse_args(argv)
  import lm_eval  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  from pretrain import hf, run as run_lib  # pylint: disable=g-import-not-at-top
  from pretrain.downstream import harness  # pylint: disable=g-import-not-at-top
  from pretrain.experiments import runs  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(os.cpu_count() or 1)
  run, params, step = run_lib.load(args.workdir, pipeline=False)
  export = os.path.join(tempfile.mkdtemp(), "export")
  hf.export(export, run, params)
  manager = harness.task_manager([t for t in args.tasks.split(",") if t])
  seq2seq = "inputs" in run.family.row_lengths(run.task_lengths)
  theirs = {"pretrained": export, "dtype": "float32", "device": "cpu", "max_length": sum(run.task_lengths.values()),
            **({} if seq2seq else {"add_bos_token": True})}
  ours = harness.PretrainLM(run=run, params=params, step=step, batch_size=args.batch_size)
  rows = []
  for task in [t for t in args.tasks.split(",") if t]:
    seconds, requests = {"pretrain": [], "hf": []}, 0
    for _ in range(args.repeats):
      for name, model, model_args in (("pretrain", ours, None), ("hf", "hf", theirs)):
        start = time.perf_counter()
        results = lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=[task], limit=args.limit,
                                          task_manager=manager, log_samples=True, batch_size=args.batch_size,
                                          verbosity="ERROR")
        seconds[name].append(time.perf_counter() - start)
        requests = sum(len(sample["resps"]) for sample in results["samples"][task])
    steady = {name: statistics.median(s[1:]) for name, s in seconds.items()}
    rows.append(f"| {task} | {requests} | {requests / steady['pretrain']:.1f} | {requests / steady['hf']:.1f} | "
                f"{steady['hf'] / steady['pretrain']:.2f} | {seconds['pretrain'][0]:.1f}, {seconds['hf'][0]:.1f} |")
  print(f"{run.family.name} run {args.workdir} (step {step}), {args.limit} documents a task, batches of "
        f"{args.batch_size}; {runs.machine()}")
  print("| task | requests | pretrain requests/s | hf requests/s | pretrain / hf | first run s (pretrain, hf) |")
  print("| --- | ---: | ---: | ---: | ---: | ---: |")
  print("\n".join(rows))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
