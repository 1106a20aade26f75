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

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import flax.linen as nn  # pylint: disable=g-import-not-at-top
import jax
import jax.numpy as jnp
import numpy as np

from pretrain import command_line
from pretrain import config as config_lib
from pretrain import models
from pretrain.data import objectives
from pretrain.errors import UserError, exit_on_user_error
from pretrain.parallel import mesh as mesh_lib
from pretrain.train import checkpoint, flops, optimizer, state as state_lib, steps
from pretrain.commands import step_profile

# The configurations of the transformers comparison: (family, config overrides, feature lengths).
PEERS = {
    "t5": ("t5", {"data.objective": "span_corruption", "model.d_model": 512, "model.mlp_dim": 1024,
                  "model.num_layers": 8, "model.num_decoder_layers": 8, "model.num_heads": 6, "model.head_dim": 64,
                  "model.vocab_size": 32128, "train.batch_size": 8}, {"inputs": 512, "targets": 114}),
    "llama": ("llama", {"data.objective": "clm", "model.d_model": 512, "model.mlp_dim": 1408, "model.num_layers": 8,
                        "model.num_heads": 8, "model.num_kv_heads": 8, "model.head_dim": 64,
                        "model.vocab_size": 32000, "train.batch_size": 8}, {"targets": 512}),
}


def random_batch(rows: int, lengths: dict[str, int], vocab_size: int) -> dict[str, np.ndarray]:
  """A batch as the feature converters make it, of random tokens without padding."""
  rng = np.random.default_rng(0)
  ones = lambda length: np.ones((rows, length), np.int32)
  if "inputs" in lengths:
    targets = rng.integers(3, vocab_size, (rows, lengths["targets"])).astype(np.int32)
    return {"encoder_input_tokens": rng.integers(3, vocab_size, (rows, lengths["inputs"])).astype(np.int32),
            "encoder_segment_ids": ones(lengths["inputs"]), "decoder_target_tokens": targets,
            "decoder_input_tokens": np.pad(targets[:, :-1], ((0, 0), (1, 0))),
            "decoder_segment_ids": ones(lengths["targets"]), "decoder_loss_weights": ones(lengths["targets"])}
  length = sum(lengths.values())
  tokens = rng.integers(3, vocab_size, (rows, length + 1)).astype(np.int32)
  return {"decoder_input_tokens": tokens[:, :-1], "decoder_target_tokens": tokens[:, 1:],
          "decoder_loss_weights": ones(length), "decoder_segment_ids": ones(length),
          "decoder_positions": np.tile(np.arange(length, dtype=np.int32), (rows, 1))}


def bench(cfg, vocab_size: int, lengths: dict[str, int], num_steps: int, warmup: int, peak: float,
          profile: bool = False) -> dict:
  converter = objectives.make(cfg.data.objective, cfg.data, 0).converter
  if converter not in ("lm", "prefix_lm", "enc_dec"):
    raise UserError(f"bench_train.py times decoder-only and encoder-decoder models, not {cfg.data.objective!r}")
  model = models.build(cfg.model, vocab_size, converter)
  mesh, rules = mesh_lib.make_mesh(cfg.mesh), mesh_lib.rules(cfg.mesh)
  tx = optimizer.make(cfg.optimizer, cfg.train.steps)
  rows = cfg.train.batch_size
  example_args = models.example_args(model, lengths)
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    shardings = state_lib.shardings(model, tx, example_args, mesh, rules)
    batch_sharding = mesh_lib.batch_sharding(mesh, rules)
    state = state_lib.create(model, tx, example_args, shardings, seed=0)
    step = jax.jit(steps.make_train_step(model, tx, optimizer.schedule(cfg.optimizer, cfg.train.steps), cfg.loss),
                   in_shardings=(shardings, batch_sharding), out_shardings=(shardings, None), donate_argnums=0)
    batch = mesh_lib.global_batch(random_batch(rows, lengths, vocab_size), batch_sharding)
    start = time.perf_counter()
    state, m = step(state, batch)
    jax.block_until_ready(m)
    compile_seconds = time.perf_counter() - start
    for _ in range(warmup):
      state, m = step(state, batch)
    jax.block_until_ready(m)
    times = []
    for _ in range(num_steps):
      start = time.perf_counter()
      state, m = step(state, batch)
      jax.block_until_ready(m)
      times.append(time.perf_counter() - start)
    checkpoint_bytes, save_blocks = _checkpoint_cost(state)
    if profile:
      def run_step():
        nonlocal state
        state, m = step(state, batch)
        jax.block_until_ready(m)
      print("Profile of one step (ms, summed over threads):")
      for name, ms in step_profile.profile(run_step):
        print(f"  {ms:10.1f}  {name}")
  step_seconds = statistics.median(times)
  tokens = rows * sum(lengths.values())
  model_flops = flops.flops_per_example(state.params, cfg.model, lengths) * rows / step_seconds
  return {"params": sum(x.size for x in jax.tree.leaves(state.params)), "tokens/step": tokens,
          "compile s": compile_seconds, "step s": step_seconds, "tokens/s": tokens / step_seconds,
          "model GFLOP/s": model_flops / 1e9, "matmul peak GFLOP/s": peak / 1e9, "MFU": model_flops / peak,
          "checkpoint MB": checkpoint_bytes / 1e6, "save blocks s": save_blocks,
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


def _peer_config(base, overrides: dict):
  cfg = base.copy_and_resolve_references()
  for key, value in overrides.items():
    section, name = key.split(".")
    cfg[section][name] = value
  return cfg


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain bench") -> None:
  parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--steps", type=int, default=10, help="timed steps per configuration")
  parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (the first compiles)")
  parser.add_argument("--vocab_size", type=int, default=4096, help="model vocabulary (rows of the embedding)")
  parser.add_argument("--compare", choices=["hf"], help="also time transformers on the PEERS configurations")
  parser.add_argument("--only", choices=list(PEERS), help="with --compare: one configuration")
  parser.add_argument("--profile", action="store_true", help="print where one step's time goes, by XLA op")
  args, cfg = command_line.parse_command_line(parser, argv)
  config_lib.validate(cfg)
  peak = flops.matmul_peak()
  print(f"{jax.device_count()} x {jax.devices()[0].device_kind}, {os.cpu_count()} CPU cores; MFU = model FLOPs "
        "(6 per parameter per token + full attention) / measured 2048^2 float32 matmul peak")
  if not args.compare:
    converter = objectives.make(cfg.data.objective, cfg.data, 0).converter
    lengths = ({"inputs": cfg.data.inputs_length, "targets": cfg.data.targets_length} if converter == "enc_dec"
               else {"targets": cfg.data.seq_len})
    print_table({os.path.basename(args.config): bench(cfg, args.vocab_size, lengths, args.steps, args.warmup, peak,
                                                               args.profile)})
    return
  from pretrain.commands import bench_peer_hf  # pylint: disable=g-import-not-at-top  (torch is only needed here)
  table = {}
  for name, (family, overrides, lengths) in PEERS.items():
    if args.only and name != args.only:
      continue
    peer_cfg = _peer_config(cfg, overrides)
    vocab_size = peer_cfg.model.vocab_size
    ours = bench(peer_cfg, vocab_size, lengths, args.steps, args.warmup, peak, args.profile)
    theirs = bench_peer_hf.bench(family, peer_cfg.model, vocab_size, peer_cfg.train.batch_size, lengths, args.steps,
                                 args.warmup)
    ours["tokens/s vs transformers"] = ours["tokens/s"] / theirs["tokens/s"]
    table[f"{name} (pretrain)"], table[f"{name} (transformers)"] = ours, theirs
  print_table(table)


if __name__ == "__main__":
  main(sys.argv[1:])
