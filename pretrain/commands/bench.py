"""Benchmarks the compiled train step: step time, tokens/s and MFU, and
optionally the same step in transformers (PyTorch) side by side.

  pretrain bench [--config=configs/quickstart.py] [--steps=10] [--config.KEY=VALUE ...]
  pretrain bench --compare=hf [--only=t5|llama] [--steps=3]

Times `--steps` steps after `--warmup` on a fixed batch of random tokens (the
data pipeline is not timed), and divides model FLOP/s by a matmul peak
measured in the same run. The family follows data.objective. `--compare=hf`
runs two fixed configurations (T5 v1.1 and Llama shapes, PEERS below) in both
frameworks and prints the ratio of tokens/s. Figures and machines are
recorded in tools/bench_train.md.
"""

import os
import statistics
import sys
import tempfile
import time

import jax

from pretrain import command_line
from pretrain import config as config_lib
from pretrain import run as run_lib
from pretrain.commands import parser_for
from pretrain.errors import UserError, exit_on_user_error
from pretrain.train import checkpoint, flops, step_profile

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


def bench(run, num_steps: int, warmup: int, peak: float, profile: bool = False) -> dict:
  """Times the train step of a run (pretrain.run): the step training runs, microbatches included."""
  cfg = run.cfg
  if not run.family.generates:
    raise UserError(f"pretrain bench times decoder-only and encoder-decoder models, not {cfg.data.objective!r}")
  state = run.create_state()
  with run.activated():
    batch = run.random_batch()
    start = time.perf_counter()
    state, m = run.train_step(state, batch)
    jax.block_until_ready(m)
    compile_seconds = time.perf_counter() - start
    for _ in range(warmup):
      state, m = run.train_step(state, batch)
    jax.block_until_ready(m)
    times = []
    for _ in range(num_steps):
      start = time.perf_counter()
      state, m = run.train_step(state, batch)
      jax.block_until_ready(m)
      times.append(time.perf_counter() - start)
    checkpoint_bytes, save_blocks = _checkpoint_cost(state)
    if profile:
      def run_step():
        nonlocal state
        state, m = run.train_step(state, batch)
        jax.block_until_ready(m)
      print("Profile of one step (ms, summed over threads):")
      for name, ms in step_profile.profile(run_step):
        print(f"  {ms:10.1f}  {name}")
  step_seconds = statistics.median(times)
  rows = cfg.train.batch_size
  tokens = rows * sum(run.family.row_lengths(run.task_lengths).values())
  model_flops = run.flops_per_example(state.params) * rows / step_seconds
  return {"params": sum(x.size for x in jax.tree.leaves(state.params)), "tokens/step": tokens,
          "microbatches": cfg.train.microbatches, "compile s": compile_seconds, "step s": step_seconds,
          "tokens/s": tokens / step_seconds, "model GFLOP/s": model_flops / 1e9, "matmul peak GFLOP/s": peak / 1e9,
          "MFU": model_flops / peak, "checkpoint MB": checkpoint_bytes / 1e6, "save blocks s": save_blocks,
          "save blocks / step": save_blocks / step_seconds}


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


def print_table(rows: dict[str, dict]) -> None:
  names = list(rows)
  keys = list(dict.fromkeys(k for row in rows.values() for k in row))
  width = max(len(k) for k in keys) + 2
  print("".ljust(width) + "".join(n.rjust(18) for n in names))
  for key in keys:
    cells = []
    for name in names:
      value = rows[name].get(key)
      text = "" if value is None else f"{value:,.0f}" if value >= 100 else f"{value:.3f}"
      cells.append(text.rjust(18))
    print(key.ljust(width) + "".join(cells))


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain bench") -> None:
  parser = parser_for(prog, __doc__)
  parser.add_argument("--steps", type=int, default=10, help="timed steps per configuration")
  parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (the first compiles)")
  parser.add_argument("--vocab_size", type=int, default=0,
                      help="vocabulary size (default: model.vocab_size, else tokenizer.vocab_size)")
  parser.add_argument("--compare", choices=["hf"], help="also time transformers on the PEERS configurations")
  parser.add_argument("--only", choices=list(PEERS), help="with --compare: one configuration")
  parser.add_argument("--profile", action="store_true", help="print where one step's time goes, by XLA op")
  args, cfg = command_line.parse_command_line(parser, argv)
  if not args.compare:
    run = run_lib.Run.build(cfg, args.vocab_size)
    peak = _peak_line()
    print_table({f"{os.path.basename(args.config)} ({cfg.data.objective})": bench(run, args.steps, args.warmup, peak,
                                                                                 args.profile)})
    return
  from pretrain.hf import bench_peer  # pylint: disable=g-import-not-at-top  (torch is only needed here)
  runs = {name: run_lib.Run.build(peer) for name, overrides in PEERS.items()
          if not args.only or name == args.only
          for peer in [config_lib.update(cfg.copy_and_resolve_references(), overrides, "bench peer")]}
  peak = _peak_line()
  table = {}
  for name, run in runs.items():
    ours = bench(run, args.steps, args.warmup, peak, args.profile)
    theirs = bench_peer.bench(run, args.steps, args.warmup)
    ours["tokens/s vs transformers"] = ours["tokens/s"] / theirs["tokens/s"]
    table[f"{name} (pretrain)"], table[f"{name} (transformers)"] = ours, theirs
  print_table(table)


def _peak_line() -> float:
  peak = flops.matmul_peak()
  print(f"{jax.device_count()} x {jax.devices()[0].device_kind}, {os.cpu_count()} CPU cores; MFU = model FLOPs "
        "(6 per parameter per token + full attention) / measured 2048^2 float32 matmul peak")
  return peak


if __name__ == "__main__":
  main(sys.argv[1:])
