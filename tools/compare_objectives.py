"""Which objective? Trains one small model per pre-training objective on the same token budget and compares them.

  python tools/compare_objectives.py [--objectives=clm,prefix_lm_decoder,span_corruption,ul2,mlm] [--steps=300]
      [--batch_size=16] [--seq_len=128] [--d_model=128] [--num_layers=2] [--enc_dec_layers=N]
      [--out=docs/compare_objectives] [--out_dir=runs/compare_objectives] [--config.KEY=VALUE ...]

Every objective trains from scratch on the bundled corpus (configs/quickstart.py, or --config, plus
--config.KEY=VALUE overrides) with the same seed, optimizer and schedule, in its own workdir
OUT_DIR/OBJECTIVE (an earlier run there is deleted first), in this process: runs do not share state
(two runs of one objective with another in between log identical losses).

Same token budget: every step processes batch_size rows of seq_len token positions, for --steps steps.
A CLM (decoder-only) or MLM (encoder-only) row is seq_len tokens; a decoder-only prefix-LM row is
inputs + targets = seq_len; an encoder-decoder row is inputs_length + targets_length = seq_len, split
per objective: span corruption takes the largest inputs_length whose targets still fit (128 -> 104 + 24,
near T5's 512 + 114), UL2 the largest that fits all its denoisers (128 -> 64 + 64, as its X-denoisers at
density 0.5 need targets as long as inputs), prefix LM half and half. So all models process the same
token positions; they do not predict the same number of target tokens (measured and reported), nor read
the same number of corpus tokens. With --enc_dec_layers equal to --num_layers (the default) an
encoder-decoder has about 1.4-2x the parameters of the decoder-only model, but each token still passes
through num_layers layers, so the layers' FLOPs per token match (as in the UL2 paper's compute-matched
comparisons); its output layer runs over the targets only, so with a small model and a 4096-way output
layer it does fewer FLOPs per step (GFLOP/step is reported).

Writes OUT.png (validation loss against tokens processed, one line per objective, and the CLM validation
loss of the decoder-only models) and OUT.md (the command, machine, date and the table, also printed).
Each run's own console output goes to OUT_DIR/OBJECTIVE/train.log.
"""

import argparse
import contextlib
import datetime
import os
import platform
import shlex
import shutil
import statistics
import sys
import textwrap
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import flax.linen as nn  # pylint: disable=g-import-not-at-top
import jax

from pretrain import command_line
from pretrain import config as config_lib
from pretrain import models
from pretrain.data import objectives, pipeline
from pretrain.data.objectives import prefix_lm, span_corruption, ul2
from pretrain.errors import UserError, exit_on_user_error
from pretrain.train import flops, loop, metrics

DEFAULT_OBJECTIVES = "clm,prefix_lm_decoder,span_corruption,ul2,mlm"
FAMILIES = {"lm": "decoder-only", "prefix_lm": "decoder-only, prefix LM", "enc_dec": "encoder-decoder",
            "encoder": "encoder-only"}
# The common yardstick: causal next-token loss on the same validation rows, which every decoder-only model can
# be evaluated on (data.eval_objectives); encoder-decoder and encoder-only models have no such loss.
YARDSTICK = "clm"


def _fits(name: str, data_cfg, extra_ids: int, inputs: int, targets: int) -> bool:
  """Whether an objective's examples fit feature lengths (inputs, targets), by the objectives' own checks."""
  lengths = {"inputs": inputs, "targets": targets}
  try:
    if name.startswith("ul2"):
      for d in ul2.parse_denoisers(data_cfg.ul2_denoisers):
        if d.kind == "S":
          prefix_lm.segment_length(lengths, ul2.MODE_TOKENS["S"], name.endswith("_decoder"))
        else:
          span_corruption.check_lengths(span_corruption.SpanCorruption(d.noise_density, d.mean_noise_span_length),
                                        inputs, targets, extra_ids, reserved=1)
    elif name == "span_corruption":
      span_corruption.check_lengths(span_corruption.SpanCorruption(data_cfg.noise_density,
                                                                   data_cfg.mean_noise_span_length),
                                    inputs, targets, extra_ids)
    else:
      prefix_lm.segment_length(lengths, None, name.endswith("_decoder"))
  except UserError:
    return False
  return True


def split_row(name: str, data_cfg, extra_ids: int, row: int) -> tuple[int, int]:
  """(inputs_length, targets_length) summing to `row` for an objective with inputs: span corruption and UL2
  take the largest inputs length whose targets fit (least padding, most text); others half and half."""
  if not (name == "span_corruption" or name.startswith("ul2")):
    half = row // 2
    if not _fits(name, data_cfg, extra_ids, half, row - half):
      raise UserError(f"--seq_len={row} is too short for {name}; raise it")
    return half, row - half
  for inputs in range(row - 1, 1, -1):
    if _fits(name, data_cfg, extra_ids, inputs, row - inputs):
      return inputs, row - inputs
  raise UserError(f"no split of a row of --seq_len={row} tokens into inputs + targets fits {name} with "
                  f"{extra_ids} sentinels; raise --seq_len, or --config.tokenizer.extra_ids if spans run out")


def set_budget(cfg, steps: int, batch_size: int, evals: int) -> None:
  """Steps and batch, `evals` validation points, one checkpoint (at the end) and no samples."""
  t = cfg.train
  t.steps, t.batch_size = steps, batch_size
  t.eval_every = max(1, steps // evals)
  t.log_every = min(t.log_every, t.eval_every)
  t.checkpoint_every, t.keep_checkpoints = steps, 1
  cfg.sample.num = 0


def run_config(base, name: str, args):
  """The config of one objective's run: the base config, the shared budget and model, the objective's lengths."""
  cfg = base.copy_and_resolve_references()
  c = cfg.data
  c.objective = name
  converter = objectives.make(name, c, 0).converter
  c.seq_len = args.seq_len
  if converter in ("prefix_lm", "enc_dec"):
    c.inputs_length, c.targets_length = split_row(name, c, cfg.tokenizer.extra_ids, args.seq_len)
  c.eval_objectives = (YARDSTICK,) if converter == "prefix_lm" else ()
  set_budget(cfg, args.steps, args.batch_size, args.evals)
  m = cfg.model
  m.d_model, m.num_layers, m.head_dim = args.d_model, args.num_layers, args.head_dim
  m.num_heads = m.num_kv_heads = args.num_heads or max(1, args.d_model // args.head_dim)
  m.mlp_dim = args.mlp_dim or 3 * args.d_model
  if converter == "enc_dec":
    m.num_layers = m.num_decoder_layers = args.enc_dec_layers or args.num_layers
  return cfg


def fresh_workdir(path: str) -> None:
  """Deletes an earlier run of this tool there (so the run starts over rather than resumes); refuses anything else."""
  if os.path.isdir(path) and os.listdir(path):
    if not any(os.path.exists(os.path.join(path, name)) for name in (metrics.METRICS_FILE, "config.json")):
      raise UserError(f"{path} exists and does not hold a run; choose another --out_dir")
    shutil.rmtree(path)
  os.makedirs(path, exist_ok=True)


def _param_shapes(model, lengths):
  """Shapes of the model's parameters, without allocating them."""
  args = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in models.example_args(model, lengths)]
  return nn.meta.unbox(jax.eval_shape(lambda *a: model.init(jax.random.key(0), *a), *args)["params"])


def measure(run, workdir: str, wall: float) -> dict:
  """Parameters, FLOPs and target tokens per step, tokens/s and the curves of a finished run."""
  cfg = run.cfg
  lengths = pipeline.feature_lengths(cfg.data, run.objective)
  model_row = models.row_lengths(run.model, lengths)  # Each token of a row once, as the training loop counts.
  tokens_per_step = cfg.train.batch_size * sum(model_row.values())
  # For the table: a prefix-LM row shown as inputs + targets.
  row = model_row if run.objective.converter in ("lm", "encoder") else {"inputs": lengths["inputs"],
                                                                       "targets": lengths["targets"]}
  shapes = _param_shapes(run.model, lengths)
  step_flops = flops.flops_per_example(shapes, cfg.model, model_row) * cfg.train.batch_size
  # Loss-bearing tokens per step, on the validation batches the eval used.
  weights = []
  for batch in pipeline.batches(run.task, "validation", lengths, cfg.train.batch_size, run.objective.converter,
                                shuffle=False, seed=cfg.train.seed, repeat=False):
    weights.append(float(models.targets_and_weights(batch)[1].sum()))
    if len(weights) == cfg.train.eval_batches:
      break
  # Kaplan et al.'s N: all but the vocabulary matrices (input embedding and output layer).
  non_embedding = sum(x.size for name, sub in shapes.items() if name not in ("embed", "lm_head")
                      for x in jax.tree.leaves(sub))
  records = metrics.read(workdir)
  logged = [r["train/step_seconds"] for r in records if "train/step_seconds" in r]
  step_seconds = logged[1:] or logged  # The first logged interval holds the compilation.
  yardstick_key = next((k for k in (records[-1] if records else {}) if k.startswith("eval/")
                        and k.endswith(f"_{YARDSTICK}/loss")), None)
  curve = [(r["step"] * tokens_per_step, r["eval/loss"]) for r in records if "eval/loss" in r]
  yardstick_curve = [(r["step"] * tokens_per_step, r[yardstick_key]) for r in records if yardstick_key in r] \
      if yardstick_key else (curve if run.objective.name == YARDSTICK else [])
  return {
      "objective": run.objective.name, "family": FAMILIES[run.objective.converter],
      "params": sum(x.size for x in jax.tree.leaves(shapes)), "non_embedding_params": non_embedding,
      "row": row, "tokens_per_step": tokens_per_step,
      "target_tokens_per_step": statistics.mean(weights) if weights else float("nan"),
      "gflop_per_step": step_flops / 1e9, "loss": curve[-1][1], "initial_loss": curve[0][1],
      "yardstick": yardstick_curve[-1][1] if yardstick_curve else None,
      "tokens_per_second": tokens_per_step / statistics.median(step_seconds), "wall": wall,
      "curve": curve, "yardstick_curve": yardstick_curve,
  }


@contextlib.contextmanager
def output_to(path: str):
  """Sends Python's and the C++ libraries' console output (progress bars, TensorFlow logs) to a file."""
  sys.stdout.flush()
  sys.stderr.flush()
  with open(path, "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
    saved = os.dup(2)
    os.dup2(log.fileno(), 2)
    try:
      yield
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)


def train_one(cfg, workdir: str) -> dict:
  fresh_workdir(workdir)
  log = os.path.join(workdir, "train.log")
  try:
    with output_to(log):
      start = time.perf_counter()
      summary = loop.train(cfg, workdir)
      wall = time.perf_counter() - start
      if summary.get("stopped_by"):
        raise UserError(f"the run in {workdir} was interrupted")
      return measure(loop.build(cfg, workdir), workdir, wall)
  except BaseException:
    print(f"The {cfg.data.objective} run failed; its output is in {log}", file=sys.stderr)
    raise


def _row_text(r: dict, batch: int) -> str:
  row = r["row"]
  if "inputs" in row:
    return f"{batch} x ({row['inputs']} + {row['targets']}) = {r['tokens_per_step']:,}"
  return f"{batch} x {row['targets']} = {r['tokens_per_step']:,}"


def table(results: list[dict], batch: int) -> str:
  lines = ["| objective | model family | parameters | tokens/step (rows x (inputs + targets)) | target tokens/step "
           "| GFLOP/step | val loss / target token (step 0) | CLM val loss (yardstick) | tokens/s | wall s |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
  for r in results:
    yardstick = f"{r['yardstick']:.3f}" if r["yardstick"] is not None else "n/a"
    lines.append(f"| {r['objective']} | {r['family']} | {r['params']:,} | {_row_text(r, batch)} | "
                 f"{r['target_tokens_per_step']:,.0f} | {r['gflop_per_step']:.1f} | {r['loss']:.3f} "
                 f"({r['initial_loss']:.2f}) | {yardstick} | {r['tokens_per_second']:,.0f} | {r['wall']:.0f} |")
  return "\n".join(lines)


def plot(results: list[dict], path: str) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, (own, common) = plt.subplots(1, 2, figsize=(13, 4.8))
  for r in results:
    line, = own.plot(*zip(*r["curve"]), "o-", markersize=3, label=f"{r['objective']} ({r['family']})")
    if r["yardstick_curve"]:
      common.plot(*zip(*r["yardstick_curve"]), "o-", markersize=3, color=line.get_color(), label=r["objective"])
  own.set_title("validation loss on each objective's own targets (not comparable across objectives)", fontsize=9)
  own.set_ylabel("cross-entropy per target token (nats)")
  common.set_title("common yardstick: CLM validation loss, decoder-only models", fontsize=9)
  common.set_ylabel("CLM cross-entropy per token (nats)")
  for ax in (own, common):
    ax.set_xlabel("tokens processed (batch x row length x steps)")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=8)
  fig.savefig(path, dpi=100, bbox_inches="tight")
  plt.close(fig)


def machine() -> str:
  return (f"{os.cpu_count()} CPU cores ({platform.machine()}), {jax.device_count()} x {jax.devices()[0].device_kind}, "
          f"jax {jax.__version__}; load average at start {os.getloadavg()[0]:.1f} (a shared machine: tokens/s "
          "and wall times are noisy)")


def markdown(blocks: list[str]) -> str:
  """Blocks separated by blank lines; prose wrapped at 100 columns, tables, code and images as they are."""
  return "\n\n".join(b if b.startswith(("|", "    ", "![", "#")) else textwrap.fill(b, 100) for b in blocks) + "\n"


def report(results: list[dict], args, argv: list[str], load: str) -> str:
  budget = results[0]["tokens_per_step"] if results else 0
  return markdown([
      "# Which objective? Small models on the same token budget",
      f"Command (from the repository root, {datetime.date.today().isoformat()}):",
      ("    python tools/compare_objectives.py " + " ".join(shlex.quote(a) for a in argv)).rstrip(),
      f"Machine: {load}.",
      f"Token budget, the same for every objective: {args.steps} steps x {args.batch_size} rows x {args.seq_len} "
      f"token positions = {args.steps * budget:,} tokens processed ({budget:,} per step). An encoder-decoder row "
      "is inputs + targets (split per objective to fit its examples), a decoder-only prefix-LM row inputs + "
      "targets, a CLM or MLM row seq_len tokens. Same data (the bundled corpus), seed, optimizer and schedule.",
      table(results, args.batch_size),
      "**The validation losses of different objectives are not comparable**: each is the cross-entropy per "
      "target token of that objective's own targets. CLM predicts every next token; prefix LM only the "
      "continuation, after reading a prefix both ways; span corruption and UL2 the corrupted spans, "
      "interleaved with sentinel tokens that are easy to predict; MLM the 15% masked tokens from both sides. "
      "Compare each curve's fall, and the yardstick: the CLM validation loss on the same validation rows "
      "(`data.eval_objectives`), which every decoder-only model has and the encoder-decoder and encoder-only "
      "models do not (n/a).",
      "Target tokens/step counts the loss-bearing tokens of the validation batches. GFLOP/step is model FLOPs "
      "(pretrain/train/flops.py). tokens/s is the median over logged intervals after the first (compilation); "
      "wall s includes compilation, evaluation and the checkpoint, and is noisy: on this shared machine an "
      "occasional run stalls for about a minute at its end.",
      f"![validation curves]({os.path.basename(args.out)}.png)"])


@exit_on_user_error
def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--objectives", default=DEFAULT_OBJECTIVES,
                      help=f"comma-separated, of {', '.join(objectives.NAMES)}")
  parser.add_argument("--steps", type=int, default=300, help="training steps of every run")
  parser.add_argument("--batch_size", type=int, default=16, help="rows per step")
  parser.add_argument("--seq_len", type=int, default=128, help="token positions per row, inputs + targets")
  parser.add_argument("--evals", type=int, default=10, help="validation points per curve")
  parser.add_argument("--d_model", type=int, default=128, help="model width")
  parser.add_argument("--num_layers", type=int, default=2, help="decoder-only and encoder-only layers")
  parser.add_argument("--enc_dec_layers", type=int, default=0,
                      help="encoder-decoder: layers in each of the encoder and decoder (0: --num_layers)")
  parser.add_argument("--head_dim", type=int, default=64, help="dimension of each attention head")
  parser.add_argument("--num_heads", type=int, default=0, help="0: d_model / head_dim")
  parser.add_argument("--mlp_dim", type=int, default=0, help="0: 3 x d_model")
  parser.add_argument("--out", default="docs/compare_objectives", help="writes OUT.png and OUT.md")
  parser.add_argument("--out_dir", default="runs/compare_objectives", help="the runs' workdirs, OUT_DIR/OBJECTIVE")
  args, base = command_line.parse_command_line(parser, argv)
  names = [n.strip() for n in args.objectives.split(",") if n.strip()]
  for name in names:
    objectives.make(name, base.data, 0)  # An unknown name fails now, not after the first runs.
  if len(set(names)) != len(names):
    raise UserError(f"--objectives names one twice: {args.objectives}")
  configs = [run_config(base, name, args) for name in names]  # Length errors before any training.
  for cfg in configs:
    config_lib.validate(cfg)
  load = machine()
  print(f"{len(names)} runs of {args.steps} steps x {args.batch_size} x {args.seq_len} tokens; {load}", flush=True)
  results = []
  for i, (name, cfg) in enumerate(zip(names, configs), 1):
    r = train_one(cfg, os.path.join(args.out_dir, name))
    results.append(r)
    print(f"[{i}/{len(names)}] {name:<18} {r['family']:<25} {r['params']:>10,} params  val loss {r['loss']:.3f} "
          f"(step 0: {r['initial_loss']:.2f})  {r['tokens_per_second']:>6,.0f} tokens/s  {r['wall']:.0f} s",
          flush=True)
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  plot(results, args.out + ".png")
  text = report(results, args, argv, load)
  with open(args.out + ".md", "w") as f:
    f.write(text)
  print(table(results, args.batch_size))
  print(f"Wrote {args.out}.md and {args.out}.png")


if __name__ == "__main__":
  main(sys.argv[1:])
