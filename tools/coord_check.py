"""The coordinate check of muP (Tensor Programs V, section 7.1): the size of every layer's activations over the
first steps of training, against the model's width, under the standard parameterization and under muP.

  python tools/coord_check.py [--family=decoder_only|encoder_decoder] [--widths=64,128,256,512,1024] \
      [--steps=4] [--learning_rate=1e-2] [--out=docs/coord_check]

Each width is the quickstart's shape scaled: d_model = w, mlp_dim = 3w, heads of 32 channels (w / 32 of them),
2 layers; muP's base width is the first width. Each model trains for --steps AdamW steps at a constant learning
rate on the same batches of random tokens (16 rows of 64); after each step, the root mean square of the output of
the embedding, of every layer and of the logits (on a fixed batch) is recorded. Under muP these stay flat as
the width grows; under the standard parameterization the logits and the layers' updates grow with it.
Prints, per parameterization and activation, the slope of log RMS against log width at the last step, and
writes OUT.csv and OUT.png (the RMS of each activation's change since the initialisation against width, one line
per step).
"""

import argparse
import csv
import os
import sys

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pretrain import config as config_lib  # pylint: disable=g-import-not-at-top
from pretrain import configs
from pretrain.parallel import mesh as mesh_lib
from pretrain.run import Run

OBJECTIVE = {"decoder_only": "clm", "encoder_decoder": "span_corruption"}
VOCAB = 512


def config(family: str, width: int, parameterization: str, base_width: int, steps: int, learning_rate: float):
  cfg = configs.load("quickstart")
  return config_lib.update(cfg, {
      "data.objective": OBJECTIVE[family], "data.seq_len": 64, "train.batch_size": 16, "train.steps": steps,
      "model.d_model": width, "model.mlp_dim": 3 * width, "model.num_heads": width // 32,
      "model.num_kv_heads": width // 32, "model.head_dim": 32, "model.num_layers": 2,
      "model.parameterization": parameterization, "model.mup_base_width": base_width,
      "optimizer.learning_rate": learning_rate, "optimizer.warmup_steps": 0, "optimizer.end_lr_ratio": 1.0,
      "optimizer.weight_decay": 0.0, "optimizer.grad_clip": 0.0, "loss.z_loss": 0.0}, "coord_check")


def _model_args(family: str, batch: dict) -> tuple:
  if family == "decoder_only":
    return batch["decoder_input_tokens"], batch["decoder_segment_ids"], batch["decoder_positions"]
  return (batch["encoder_input_tokens"], batch["decoder_input_tokens"], batch["encoder_segment_ids"],
          batch["decoder_segment_ids"])


def _is_tracked(path: tuple) -> bool:
  """The embedding, each block's output and the output layer's (the logits)."""
  name = path[-1] if path else ""
  return name in ("embed", "lm_head") or name.startswith("layer_")


def activations(run: Run, params, batch: dict, family: str) -> dict[str, np.ndarray]:
  """{module path: its output} for the tracked modules, on `batch`."""
  _, state = run.model.apply({"params": params}, *_model_args(family, batch), mutable=["moe"],
                             capture_intermediates=lambda module, method: method == "__call__" and
                             _is_tracked(module.path))
  outputs = {}
  for path, value in jax.tree_util.tree_flatten_with_path(state["intermediates"])[0]:
    keys = [p.key for p in path if hasattr(p, "key") and p.key != "__call__"]
    outputs["logits" if keys[-1] == "lm_head" else "/".join(keys)] = np.asarray(value, np.float64)
  return outputs


def _rms(x) -> float:
  return float(np.sqrt(np.mean(np.square(x))))


def measure(family: str, widths: list[int], steps: int, learning_rate: float, parameterizations=("standard", "mup")):
  """Rows {parameterization, width, step, activation, rms, change}: the RMS of the activation and of its change
  since the initialisation (step 0)."""
  rows = []
  for parameterization in parameterizations:
    for width in widths:
      run = Run.build(config(family, width, parameterization, widths[0], steps, learning_rate), VOCAB)
      state = run.create_state()
      probe = run.random_batch()  # Trained on and measured on: the updates' alignment with their inputs shows.
      initial = activations(run, state.params, probe, family)
      for step in range(steps + 1):
        for name, value in activations(run, state.params, probe, family).items():
          rows.append({"parameterization": parameterization, "width": width, "step": step, "activation": name,
                       "rms": _rms(value), "change": _rms(value - initial[name])})
        if step < steps:
          state, _ = run.train_step(state, mesh_lib.global_batch(probe, run.batch_sharding))
  return rows


def slopes(rows: list[dict], step: int, what: str = "change") -> dict[tuple[str, str], float]:
  """{(parameterization, activation): slope of log2 `what` (rms or change) against log2 width} at `step`."""
  by_key = {}
  for r in rows:
    if r["step"] == step:
      by_key.setdefault((r["parameterization"], r["activation"]), []).append((r["width"], r[what]))
  return {key: float(np.polyfit(np.log2([w for w, _ in pts]), np.log2([v for _, v in pts]), 1)[0])
          for key, pts in by_key.items() if len(pts) > 1}


def plot(rows: list[dict], path: str, title: str) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  names = sorted({r["activation"] for r in rows})
  kinds = sorted({r["parameterization"] for r in rows}, reverse=True)
  steps = sorted({r["step"] for r in rows} - {0})  # The change since the initialisation, after each step.
  fig, axes = plt.subplots(len(kinds), len(names), figsize=(3 * len(names), 2.8 * len(kinds)), squeeze=False,
                           sharex=True)
  cmap = plt.get_cmap("viridis")
  for i, kind in enumerate(kinds):
    for j, name in enumerate(names):
      ax = axes[i][j]
      for step in steps:
        pts = sorted((r["width"], r["change"]) for r in rows
                     if r["parameterization"] == kind and r["activation"] == name and r["step"] == step)
        ax.plot([w for w, _ in pts], [v for _, v in pts], marker="o", ms=3,
                color=cmap(step / max(steps[-1], 1)), label=f"step {step}")
      ax.set_xscale("log", base=2)
      ax.set_yscale("log")
      ax.set_title(f"{kind}: {name}", fontsize=9)
      if i == len(kinds) - 1:
        ax.set_xlabel("width (d_model)")
  axes[0][0].set_ylabel("RMS of the change since step 0")
  axes[0][-1].legend(fontsize=7)
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=90)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--family", default="decoder_only", choices=sorted(OBJECTIVE))
  parser.add_argument("--widths", default="64,128,256,512,1024")
  parser.add_argument("--steps", type=int, default=4)
  parser.add_argument("--learning_rate", type=float, default=1e-2)
  parser.add_argument("--out", default="")
  args = parser.parse_args(argv)
  widths = [int(w) for w in args.widths.split(",")]
  rows = measure(args.family, widths, args.steps, args.learning_rate)
  change, size = slopes(rows, args.steps), slopes(rows, args.steps, "rms")
  print(f"slope of log2 RMS against log2 width after {args.steps} steps ({args.family}, widths {args.widths}, "
        f"learning rate {args.learning_rate}): of the change since initialisation, and of the activation")
  print("| activation | change, standard | change, muP | activation, standard | activation, muP |\n"
        "| --- | ---: | ---: | ---: | ---: |")
  for name in sorted({a for _, a in change}):
    print(f"| {name} | {change[('standard', name)]:+.2f} | {change[('mup', name)]:+.2f} | "
          f"{size[('standard', name)]:+.2f} | {size[('mup', name)]:+.2f} |")
  if args.out:
    with open(args.out + ".csv", "w", newline="") as f:
      writer = csv.DictWriter(f, fieldnames=list(rows[0]))
      writer.writeheader()
      writer.writerows(rows)
    plot(rows, args.out + ".png", f"coordinate check, {args.family}: RMS against width, steps 0-{args.steps}")


if __name__ == "__main__":
  main()
