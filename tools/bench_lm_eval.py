"""Requests per second of lm-eval's `pretrain` model type against lm-eval's own `hf` backend on the run's Hugging
Face export, on this machine's CPU: each task run by one backend, then the other, --repeats times, the medians
compared, and the two backends' answers side by side (notes: tools/bench_lm_eval.md).

  python tools/bench_lm_eval.py --workdir=runs/quickstart [--tasks=pretrain_cloze,pretrain_documents,...]
      [--limit=50] [--repeats=3] [--batch_size=32]

Both backends score in float32 with batches of --batch_size requests, each model built once (its loading outside
the times), the hf backend with add_bos_token=True, which it needs to read the run's rows as they were trained
(False for a rolling log-likelihood, whose first token is read after the prefix BOS alone, as the pretrain type
reads it: tests/downstream/test_harness.py); a request is one lm-eval request (a choice of a multiple-choice document, a
rolling document, a generation). The pretrain backend's compilation (once per shape) falls in the first repeat;
the median of the others is the steady state. The last column is the largest difference of the two backends'
log-likelihoods of a request (or how many generations differ): both score the same model.
"""

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _difference(ours: dict, theirs: dict, task: str) -> str:
  """The largest |difference| of two backends' log-likelihoods of a task's requests, or how many of its
  generations differ."""
  samples = lambda results: sorted(results["samples"][task], key=lambda sample: sample["doc_id"])
  value = lambda resp: resp[0][0] if isinstance(resp[0], (list, tuple)) else resp[0]
  pairs = [(value(x), value(y)) for a, b in zip(samples(ours), samples(theirs))
           for x, y in zip(a["resps"], b["resps"])]
  if pairs and isinstance(pairs[0][0], str):
    return f"{sum(x != y for x, y in pairs)} of {len(pairs)} generations differ"
  return f"{max((abs(x - y) for x, y in pairs), default=0.0):.1e}"


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--workdir", required=True, help="a run of pretrain train")
  parser.add_argument("--tasks", default="pretrain_cloze,pretrain_documents,pretrain_cloze_gen",
                      help="comma-separated lm-eval tasks")
  parser.add_argument("--limit", type=int, default=50, help="documents of each task")
  parser.add_argument("--repeats", type=int, default=3, help="runs of each task by each backend (at least 2)")
  parser.add_argument("--batch_size", type=int, default=32, help="requests per batch, both backends")
  args = parser.parse_args(argv)
  if args.repeats < 2:
    parser.error("--repeats must be at least 2: the first run holds the compilations")
  import lm_eval  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from lm_eval.models.huggingface import HFLM  # pylint: disable=g-import-not-at-top
  from pretrain import hf, run as run_lib  # pylint: disable=g-import-not-at-top
  from pretrain.downstream import harness  # pylint: disable=g-import-not-at-top
  from pretrain.experiments import runs  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(os.cpu_count() or 1)
  tasks = [t for t in args.tasks.split(",") if t]
  run, params, step = run_lib.load(args.workdir, pipeline=False)
  scratch = tempfile.mkdtemp(prefix="bench_lm_eval-")
  atexit.register(shutil.rmtree, scratch, ignore_errors=True)  # The export, gone with the process.
  export = os.path.join(scratch, "export")
  hf.export(export, run, params)
  manager = harness.task_manager(tasks)
  ours = harness.PretrainLM(run=run, params=params, step=step, batch_size=args.batch_size)
  theirs = {}
  for bos in (True, False):
    theirs[bos] = HFLM(pretrained=export, dtype="float32", device="cpu", max_length=ours.max_length,
                       batch_size=args.batch_size, **({"add_bos_token": bos} if ours.backend == "causal" else {}))
    if ours.backend == "seq2seq":
      # transformers 5 reads every T5 config as tied and the hf backend ties an export's own lm_head to the
      # embedding (tests/downstream/test_harness.py): loaded alone, the model keeps its two matrices.
      theirs[bos]._model = transformers.AutoModelForSeq2SeqLM.from_pretrained(export).eval()
  rows = []
  for task in tasks:
    rolling = lm_eval.tasks.get_task_dict([task], manager)[task].OUTPUT_TYPE == "loglikelihood_rolling"
    seconds, results = {"pretrain": [], "hf": []}, {}
    for _ in range(args.repeats):
      for name, model in (("pretrain", ours), ("hf", theirs[not rolling])):
        start = time.perf_counter()
        results[name] = lm_eval.simple_evaluate(model=model, tasks=[task], limit=args.limit, task_manager=manager,
                                                log_samples=True, verbosity="ERROR")
        seconds[name].append(time.perf_counter() - start)
    requests = sum(len(sample["resps"]) for sample in results["pretrain"]["samples"][task])
    steady = {name: statistics.median(s[1:]) for name, s in seconds.items()}
    rows.append(f"| {task} | {requests} | {requests / steady['pretrain']:.1f} | {requests / steady['hf']:.1f} | "
                f"{steady['hf'] / steady['pretrain']:.2f} | {seconds['pretrain'][0]:.1f}, {seconds['hf'][0]:.1f} | "
                f"{_difference(results['pretrain'], results['hf'], task)} |")
  print(f"{run.family.name} run {args.workdir} (step {step}), {args.limit} documents a task, batches of "
        f"{args.batch_size}; {runs.machine()}")
  print("| task | requests | pretrain requests/s | hf requests/s | pretrain / hf | first run s (pretrain, hf) | "
        "largest difference |")
  print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
  print("\n".join(rows))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
