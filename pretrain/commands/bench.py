"""Benchmarks the compiled train step: step time, tokens/s and MFU, and
optionally the same step in transformers (PyTorch) side by side.

  pretrain bench [--config=quickstart] [--steps=10] [--config.KEY=VALUE ...]
  pretrain bench --compare=hf [--only=t5|llama|config] [--steps=5]
  pretrain bench --config=quickstart_moe --compare=dense
  pretrain bench --config.optimizer.name=muon --compare=adamw
  pretrain bench --config.mesh.stage=4 --config.train.microbatches=8 --compare=unsplit

Times `--steps` steps after `--warmup` on a fixed batch of random tokens (the
data pipeline is not timed) and prints their median, min and max, tokens/s
and MFU: model FLOPs per second over a matmul peak measured in the same run
(before and after the steps; the best counts). The family follows
data.objective. `--compare=hf` times the same architecture, batch and AdamW
step in transformers, taking the two sides in turn (A B A B ...) so that the
machine's load reaches both, and prints the ratio of tokens/s; by default on
two fixed shapes (T5 v1.1 and Llama, PEERS below), with `--only=config` on
the config itself. `--matmuls` also times the step's matrix products alone,
each compiled by itself (and through torch): what the step would take if
every other op were free. `--compare=dense` times a mixture-of-experts config
against its dense counterpart of equal active parameters (each feed-forward
layer one SwiGLU as wide as its top_k experts together, no router), in turn,
and prints the MoE step's time over the dense one's. FLOPs and MFU count the
active parameters of an MoE layer (top_k of its experts), so MFU compares the
two on the same work per token. `--compare=adamw` times the config's optimizer
(Muon, Adafactor) against the same model under AdamW, in turn: the cost of
its update per step. `--compare=unsplit` times a config with a stage (pipeline) or
context axis against the same config with those devices on the data axis
(the pipeline's microbatches then accumulate gradients): the pipeline's
bubble and hand-offs, or the context axis's gathers, against what they save
in memory. Figures and machines are recorded in
tools/bench_train.md.
"""

import math
import os
import statistics
import sys
import tempfile
import time

import flax
import jax
import jax.numpy as jnp

from pretrain import cli, config as config_lib, run as run_lib
from pretrain.bench import matmul_floor, step_profile
from pretrain.system.console import log
from pretrain.system.errors import UserError, exit_on_user_error
from pretrain.train import checkpoint, flops

# The configurations of the transformers comparison, as config overrides.
PEERS = {
    "t5": {"data.objective": "span_corruption", "data.inputs_length": 512, "data.targets_length": 114,
           "model.d_model": 512, "model.mlp_dim": 1024, "model.num_layers": 8, "model.num_decoder_layers": 8,
           "model.num_heads": 6, "model.num_kv_heads": 6, "model.head_dim": 64, "model.vocab_size": 32128,
           "train.batch_size": 8},
    "llama": {"data.objective": "clm", "data.seq_len": 512, "model.d_model": 512, "model.mlp_dim": 1408,
              "model.num_layers": 8, "model.num_heads": 8, "model.num_kv_heads": 8, "model.head_dim": 64,
              "model.vocab_size": 32000, "train.batch_size": 8},
}


def prepare(run) -> tuple:
  """Our side of a run (pretrain.run): a function that runs the train step training runs (microbatches
  included) on a fixed random batch and waits for it, compiled here; and the rows known before timing."""
  cfg = run.cfg
  if not run.family.generates:
    raise UserError(f"pretrain bench times decoder-only and encoder-decoder models, not {cfg.data.objective!r}")
  state = run.create_state()
  with run.activated():
    batch = run.random_batch()

  def step():
    nonlocal state
    with run.activated():
      state, metrics = run.train_step(state, batch)
      jax.block_until_ready(metrics)

  start = time.perf_counter()
  step()
  info = {"params": sum(x.size for x in jax.tree.leaves(state.params)), "microbatches": cfg.train.microbatches,
          "compile s": time.perf_counter() - start}
  if run.pipeline:
    info["pipeline bubble"] = run.pipeline.bubble
  # Logged before the timing, so that a run stopped by a time limit still tells where its time went.
  log(f"{run.cfg.data.objective}: compiled and ran the first step in {info['compile s']:.1f} s")
  return step, info, lambda: state


def time_alternately(steps: dict, num_steps: int, warmup: int) -> dict[str, list[float]]:
  """Seconds of each of `num_steps` calls of every step function, the sides taken in turn (A B A B ...)
  so that a change in the machine's load reaches them all, after `warmup` untimed rounds."""
  for _ in range(warmup):
    for step in steps.values():
      step()
  times = {name: [] for name in steps}
  for _ in range(num_steps):
    for name, step in steps.items():
      start = time.perf_counter()
      step()
      times[name].append(time.perf_counter() - start)
  return times


def dense_counterpart(cfg):
  """The config with each mixture-of-experts layer replaced by a dense SwiGLU of its active width (top_k x the
  experts' width): equal active parameters, no routing."""
  if not cfg.model.moe_experts:
    raise UserError("--compare=dense times a mixture-of-experts config against its dense counterpart; set "
                    "model.moe_experts (e.g. --config=quickstart_moe)")
  if cfg.model.moe_every != 1 or cfg.model.moe_shared_mlp_dim:
    raise UserError("--compare=dense needs every feed-forward layer MoE (model.moe_every=1) and no shared expert: "
                    "only then is the counterpart one dense layer of the active width")
  dense = cfg.copy_and_resolve_references()
  dense.model.mlp_dim = cfg.model.moe_top_k * (cfg.model.moe_mlp_dim or cfg.model.mlp_dim)
  dense.model.moe_experts = 0
  return dense


def timing_rows(times: list[float], tokens: int, step_flops: float, peak: float) -> dict:
  median = statistics.median(times)
  return {"tokens/step": tokens, "step s (median)": median, "step s (min)": min(times), "step s (max)": max(times),
          "tokens/s": tokens / median, "model GFLOP/s": step_flops / median / 1e9, "MFU": step_flops / median / peak}


def tokens_and_flops(run, params) -> tuple[int, float]:
  rows = run.cfg.train.batch_size
  return rows * sum(run.family.row_lengths(run.task_lengths).values()), run.flops_per_example(params) * rows


def _checkpoint_cost(state) -> tuple[int, float]:
  """Bytes of an Orbax checkpoint of `state`, and how long an asynchronous save
  blocks the caller (a second save once the first is written, as in a running loop)."""
  with tempfile.TemporaryDirectory() as directory:
    saver = checkpoint.Checkpointer(directory, keep=1)
    saver.save(1, state)
    saver.manager.wait_until_finished()
    start = time.perf_counter()
    saver.save(2, state)
    blocked = time.perf_counter() - start
    saver.close()
    size = sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(os.path.join(directory, "2"))
               for f in files)
  return size, blocked


def _matmuls_alone(run, state, name: str, with_torch: bool, top: int = 12) -> dict:
  """Times the train step's matrix products one by one (pretrain.bench.matmul_floor), prints the costliest,
  and returns their total seconds as table rows."""
  with run.activated():
    dots = matmul_floor.dots_of(jax.make_jaxpr(run.train_step)(state, run.random_batch()))
  rows = matmul_floor.floor(dots, with_torch=with_torch)
  columns = [c for c in ("XLA s", "XLA plain s", "torch plain s", "best s") if c in rows[0]]
  print(f"The matrix products of one step of {name}, each compiled alone (seconds for all of its count; plain: "
        "as [batch, rows, contracted] x [batch, contracted, columns]):")
  print(f"  {'count':>5} {'GFLOP':>7}" + "".join(f" {c:>13}" for c in columns) + "  product")
  for row in rows[:top]:
    print(f"  {row['count']:5d} {row['GFLOP']:7.1f}" + "".join(f" {row[c]:13.3f}" for c in columns) +
          f"  {row['dot']}")
  if len(rows) > top:
    print(f"  ... and {len(rows) - top} more")
  info = {"matmul GFLOP/step": sum(r["GFLOP"] for r in rows)}
  for column in columns:
    info[f"matmuls alone s ({column.removesuffix(' s')})"] = sum(r[column] for r in rows)
  return info


def print_profile(name: str, run, step, state) -> None:
  """Where one step's time goes, by XLA op (pretrain.bench.step_profile)."""
  with run.activated():
    hlo_text = run.train_step.lower(state, run.random_batch()).compile().as_text()
  print(f"Profile of one step of {name} (ms of its wall clock, shared among the ops running at once):")
  for op, ms in step_profile.profile(step, hlo_text):
    print(f"  {ms:10.1f}  {op}")


def print_table(rows: dict[str, dict]) -> None:
  names = list(rows)
  keys = list(dict.fromkeys(k for row in rows.values() for k in row))
  width, column = max(len(k) for k in keys) + 2, max(18, *(len(n) + 2 for n in names))
  print("".ljust(width) + "".join(n.rjust(column) for n in names))
  for key in keys:
    cells = []
    for name in names:
      value = rows[name].get(key)
      # Three significant digits below 0.01 (a tiny matmul's seconds), where three decimals would print 0.000.
      text = ("" if value is None else f"{value:,.0f}" if value >= 100 else f"{value:.3f}" if abs(value) >= 0.01
              or value == 0 else f"{value:.3g}")
      cells.append(text.rjust(column))
    print(key.ljust(width) + "".join(cells))


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain bench") -> None:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--steps", type=cli.at_least(1), default=10, help="timed steps per side")
  parser.add_argument("--warmup", type=cli.at_least(0), default=2,
                      help="untimed steps first, after the one that compiles")
  parser.add_argument("--vocab_size", type=cli.at_least(0), default=0,
                      help="vocabulary size (default: model.vocab_size, else tokenizer.vocab_size)")
  parser.add_argument("--compare", choices=["hf", *COUNTERPARTS],
                      help="also time transformers (hf), the MoE config's dense counterpart (dense), or the same "
                           "model under AdamW (adamw: what Muon or Adafactor costs), or the config without its stage "
                           "and context axes (unsplit), in turn")
  parser.add_argument("--only", choices=[*PEERS, "config"],
                      help="with --compare: one of the fixed shapes, or the --config itself")
  parser.add_argument("--no_save", action="store_true",
                      help="skip timing a checkpoint save (it writes the state twice: minutes for a large model)")
  parser.add_argument("--profile", action="store_true", help="print where one step's time goes, by XLA op")
  parser.add_argument("--matmuls", action="store_true",
                      help="also time the step's matrix products alone, each compiled by itself (with --compare=hf, "
                           "also through torch): a floor for the step with this machine's matmul kernels")
  args, cfg = cli.parse_command_line(parser, argv)
  if args.only and args.compare != "hf":
    raise UserError(f"--only={args.only} picks what --compare=hf times; add --compare=hf, or leave --only out to "
                    "time the --config")
  if args.compare in COUNTERPARTS:
    return compare_counterpart(args, cfg)
  if not args.compare:
    runs = {f"{os.path.basename(args.config)} ({cfg.data.objective})": run_lib.Run.build(cfg, args.vocab_size)}
  elif args.only == "config":
    runs = {"config": run_lib.Run.build(cfg, args.vocab_size)}
  else:
    runs = {name: run_lib.Run.build(config_lib.update(cfg.copy_and_resolve_references(), overrides, "bench peer"))
            for name, overrides in PEERS.items() if not args.only or name == args.only}
  dtype = flops.peak_dtype(cfg.model)
  peaks = [flops.matmul_peak(dtype=dtype)]
  if args.compare:
    from pretrain.bench import hf_peer  # pylint: disable=g-import-not-at-top  (torch is only needed here)
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  print(versions(cores, dtype, hf_peer if args.compare else None))
  table = {}
  for name, run in runs.items():
    ours, ours_info, final_state = prepare(run)
    steps = {"pretrain": ours}
    if args.compare:
      steps["transformers"], theirs_info = hf_peer.prepare(run, threads=cores)
    times = time_alternately(steps, args.steps, args.warmup)
    peaks.append(flops.matmul_peak(dtype=dtype))  # Measured again after the steps: the best of both is the peak.
    tokens, step_flops = tokens_and_flops(run, final_state().params)
    ours_info |= timing_rows(times["pretrain"], tokens, step_flops, max(peaks))
    if not args.no_save:
      checkpoint_bytes, ours_info["save blocks s"] = _checkpoint_cost(final_state())
      ours_info["checkpoint MB"] = checkpoint_bytes / 1e6
      ours_info["save blocks / step"] = ours_info["save blocks s"] / ours_info["step s (median)"]
    if args.profile:
      print_profile(name, run, ours, final_state())
    if args.matmuls:
      ours_info |= _matmuls_alone(run, final_state(), name, with_torch=bool(args.compare))
    if not args.compare:
      table[name] = ours_info
      continue
    theirs_info |= timing_rows(times["transformers"], tokens, step_flops, max(peaks))
    ours_info["tokens/s vs transformers"] = ours_info["tokens/s"] / theirs_info["tokens/s"]
    # The same from each side's fastest step: the machine's noise only ever adds time, and a stretch of it
    # can take in the median of a few steps.
    ours_info["fastest steps vs transformers"] = theirs_info["step s (min)"] / ours_info["step s (min)"]
    if args.matmuls:
      ours_info["vs transformers, if only matmuls"] = (theirs_info["step s (median)"] /
                                                       ours_info["matmuls alone s (best)"])
    table[f"{name} (pretrain)"], table[f"{name} (transformers)"] = ours_info, theirs_info
  print(f"matmul peak: {max(peaks) / 1e9:,.0f} GFLOP/s (best of {len(peaks)} measurements in this run); "
        f"{args.steps} timed steps per side after {args.warmup} warm-up" + (", sides in turn" if args.compare else ""))
  print_table(table)


def adamw_counterpart(cfg):
  """The config with its optimizer replaced by AdamW (the same rate and decay): what Muon's orthogonalisation or
  Adafactor's factoring cost per step is measured against."""
  if cfg.optimizer.name == "adamw":
    raise UserError("--compare=adamw times another optimizer's step against AdamW's; set optimizer.name (e.g. "
                    "--config.optimizer.name=muon)")
  other = cfg.copy_and_resolve_references()
  other.optimizer.name = "adamw"
  return other


def unsplit_counterpart(cfg):
  """The config without its stage and context axes, their devices on the data axis (train.microbatches then
  accumulate gradients one by one, as many of them as the larger data axis leaves whole rows): what pipeline and
  context parallelism cost or save."""
  m = cfg.mesh
  if m.stage == 1 and m.context == 1:
    raise UserError("--compare=unsplit times a config with a stage or context axis against the same config without "
                    "them; set mesh.stage or mesh.context")
  unsplit = cfg.copy_and_resolve_references()
  unsplit.mesh.data = -1 if m.data == -1 else m.data * m.stage * m.context
  for field in ("stage", "context", "stage_repeats", "dcn_stage", "dcn_context"):
    unsplit.mesh[field] = 1
  sizes = {axis: unsplit.mesh[axis] for axis in ("data", "fsdp", "expert", "tensor")}
  known = math.prod(size for size in sizes.values() if size != -1)
  sizes = {axis: max(jax.device_count() // known, 1) if size == -1 else size for axis, size in sizes.items()}
  rows = unsplit.train.batch_size // (sizes["data"] * sizes["fsdp"] * sizes["expert"])
  unsplit.train.microbatches = max(d for d in range(1, cfg.train.microbatches + 1)
                                   if cfg.train.microbatches % d == 0 and rows % d == 0)
  return unsplit


# --compare with a counterpart config: its name, the counterpart, and what the table says the counterpart is.
COUNTERPARTS = {"dense": (dense_counterpart, lambda c: f"model.mlp_dim={c.model.mlp_dim}, no experts"),
                "adamw": (adamw_counterpart, lambda c: "optimizer.name=adamw"),
                "unsplit": (unsplit_counterpart, lambda c: f"mesh.data={c.mesh.data}, no stage or context axis, "
                                                            f"train.microbatches={c.train.microbatches}")}


def compare_counterpart(args, cfg) -> None:
  """Times the config's step and its counterpart's (COUNTERPARTS[args.compare]: the MoE's dense counterpart, or
  the same model under AdamW), in turn, and prints both and the ratio of their step times."""
  make, describe = COUNTERPARTS[args.compare]
  other = args.compare
  names = {"dense": "moe", "adamw": cfg.optimizer.name, "unsplit": "split"}
  runs = {names[other]: run_lib.Run.build(cfg, args.vocab_size), other: run_lib.Run.build(make(cfg), args.vocab_size)}
  dtype = flops.peak_dtype(cfg.model)
  peaks = [flops.matmul_peak(dtype=dtype)]
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  print(versions(cores, dtype))
  prepared = {name: prepare(run) for name, run in runs.items()}
  times = time_alternately({name: step for name, (step, _, _) in prepared.items()}, args.steps, args.warmup)
  peaks.append(flops.matmul_peak(dtype=dtype))
  table = {}
  for name, (_, info, final_state) in prepared.items():
    tokens, step_flops = tokens_and_flops(runs[name], final_state().params)
    table[name] = info | timing_rows(times[name], tokens, step_flops, max(peaks))
  ours = names[other]
  table[ours][f"step vs {other} (median)"] = table[ours]["step s (median)"] / table[other]["step s (median)"]
  table[ours][f"step vs {other} (fastest)"] = table[ours]["step s (min)"] / table[other]["step s (min)"]
  if args.profile:
    for name, (step, _, final_state) in prepared.items():
      print_profile(name, runs[name], step, final_state())
  print(f"matmul peak: {max(peaks) / 1e9:,.0f} GFLOP/s (best of {len(peaks)} measurements in this run); "
        f"{args.steps} timed steps per side after {args.warmup} warm-up, sides in turn; {other}: "
        f"{describe(runs[other].cfg)}")
  print_table(table)


def versions(cores: int, dtype: jnp.dtype, peer=None) -> str:
  """The libraries and threads of each side, and the machine."""
  line = (f"{jax.device_count()} x {jax.devices()[0].device_kind}, {cores} cores; pretrain: jax {jax.__version__}, "
          f"flax {flax.__version__}, XLA's thread pool over the {cores} cores")
  if peer is not None:
    line += "; transformers: " + peer.versions()
  return line + ("\nMFU = model FLOPs (6 per parameter per token + full attention) / the measured "
                 f"{flops.peak_size()}^2 {dtype} matmul peak")


if __name__ == "__main__":
  main(sys.argv[1:])
