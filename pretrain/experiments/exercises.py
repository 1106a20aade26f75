"""The seed's ablation exercises, each one `pretrain sweep`: MLM's masking rate, span corruption's mean span
length, prefix LM's prefix share, and BERT with and without next-sentence prediction. Collects their reports
into docs/exercises.md, each under the sweep command that reproduces it.

  pretrain experiment exercises [--only=mlm_rate,...] [--out=docs/exercises] [--out_dir=runs/exercises] [--steps=300]
"""

import argparse
import collections
import os
import shlex
import shutil

from pretrain.experiments import runs, sweep, sweep_report

def _common(steps: int) -> list[str]:
  """Every sweep's flags: the same small model (128 wide, 2 layers), budget and probe."""
  return ["--config.model.d_model=128", "--config.model.num_layers=2", "--config.model.num_heads=2",
          "--config.model.num_kv_heads=2", "--config.model.head_dim=64", "--config.model.mlp_dim=384",
          f"--config.train.steps={steps}", "--config.train.batch_size=16", f"--config.train.eval_every={steps}",
          f"--config.train.checkpoint_every={steps}", "--config.train.keep_checkpoints=1",
          "--config.sample.num=0", "--probe=same_document", "--probe_seeds=3"]


# name: (title, what is compared and how, the sweep's own flags, the metric of the verdict)
EXERCISES = {
    "mlm_rate": (
        "MLM masking rate: 10%, 15%, 30%, 40%",
        "An encoder trained with MLM (80% [MASK], 10% random, 10% kept) at each rate (Devlin et al. 2019 use 15%; "
        "Wettig et al. 2023 find 40% better for large models). The MLM loss is over a different share of "
        "tokens at each rate, so it does not compare the rates; the same-document probe on held-out documents "
        "does.",
        ["--config.data.objective=mlm", "--grid.data.mlm_rate=0.1,0.15,0.3,0.4"], "probe/same_document_probe"),
    "span_length": (
        "Span corruption: mean span length 1, 3, 8, 16 at noise density 0.15",
        "T5 (encoder-decoder) with span corruption (Raffel et al. 2020 choose 3). The targets differ in length "
        "and kind between span lengths, so the loss does not compare them; the probe of the encoder's features "
        "does.",
        ["--config.data.objective=span_corruption", "--config.data.inputs_length=128",
         "--config.data.targets_length=64", "--config.optimizer.learning_rate=1e-3",
         "--grid.data.mean_noise_span_length=1,3,8,16"], "probe/same_document_probe"),
    "prefix_share": (
        "Prefix LM: the prefix fixed at 25%, 50%, 75% of the row, against a uniform split",
        "A decoder-only prefix LM (the prefix read bidirectionally); prefix_share=0 is the uniform random split "
        "point. Every model is also evaluated as a causal LM on the same validation rows "
        "(eval/corpus_clm/bits_per_byte, data.eval_objectives=clm), a yardstick the shares do not change.",
        ["--config.data.objective=prefix_lm_decoder", "--config.data.seq_len=128",
         "--config.data.inputs_length=64", "--config.data.targets_length=64", "--config.data.eval_objectives=('clm',)",
         "--grid.data.prefix_share=0,0.25,0.5,0.75"], "eval/corpus_clm/bits_per_byte"),
    "nsp": (
        "BERT with and without next-sentence prediction",
        "The same encoder trained with MLM alone and with MLM plus NSP (pairs of segments, half of them not "
        "consecutive; Liu et al. 2019 find NSP does not help). Both mask 15%; the NSP rows are sentence pairs, "
        "so their MLM loss is over other rows; the probe compares them.",
        ["--grid.data.objective=mlm,nsp"], "probe/same_document_probe"),
}


def main(argv: list[str], prog: str = "pretrain experiment exercises") -> None:
  parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--only", default=",".join(EXERCISES), help="which exercises (comma-separated)")
  parser.add_argument("--steps", type=int, default=300, help="training steps of every run")
  parser.add_argument("--seeds", default="0,1,2", help="pre-training seeds of every point, comma-separated")
  parser.add_argument("--out", default="docs/exercises", help="writes OUT.md and OUT/NAME.png")
  parser.add_argument("--out_dir", default="runs/exercises", help="the sweeps, OUT_DIR/NAME")
  args = parser.parse_args(argv)
  chosen = [name for name in args.only.split(",") if name]
  unknown = [name for name in chosen if name not in EXERCISES]
  if unknown:
    parser.error(f"--only: unknown exercises {unknown}; choose from {', '.join(EXERCISES)}")
  seeds = runs.seeds(args.seeds)
  os.makedirs(args.out, exist_ok=True)
  blocks = ["# The exercises: masking rate, span length, prefix share, NSP",
            f"Each section is one `pretrain sweep`, its command above its table: {args.steps} steps x 16 rows of "
            f"128 tokens (span corruption: 128 inputs, 64 targets), a 128-wide 2-layer model, pre-training seeds "
            f"{', '.join(map(str, seeds))}, on the bundled corpus's train split. A figure 'a +- b' is the mean over "
            "the seeds and the half-width of its 95% interval (Student's t). probe/"
            "same_document_probe: a linear probe on the frozen mean hidden state tells whether two passages of "
            "held-out documents come from one document (chance 0.5), the mean of 3 probe seeds per run; /init: "
            "the same model at its initial parameters, the baseline that pre-training must beat.",
            f"Machine: {runs.machine()}. {runs.data_line()}"]
  for name in chosen:
    title, about, flags, metric = EXERCISES[name]
    where = os.path.join(args.out_dir, name)
    argv_ = [f"--workdir={where}", *_common(args.steps), *flags, f"--grid.train.seed={','.join(map(str, seeds))}",
             f"--metric={metric}"]
    sweep.main(argv_)
    points = sweep_report.collect(where, collections.defaultdict(lambda: args.steps))
    report = sweep_report.report(where, points, metric, shlex.join(["pretrain", "sweep", *argv_]))
    shutil.copy(os.path.join(where, "sweep.png"), os.path.join(args.out, f"{name}.png"))
    report = [b.replace("](sweep.png)", f"]({os.path.basename(args.out)}/{name}.png)") for b in report]
    blocks += [f"## {title}", about, f"Command ({runs.where_run()}):",
               "    .venv/bin/pretrain sweep " + shlex.join(argv_), *report]
  path = args.out + ".md"
  with open(path, "w") as f:
    f.write(runs.markdown(blocks))
  print(f"Wrote {path} and {args.out}/")
