"""Benchmarks the compiled train step: step time, tokens/s and MFU.

  python tools/bench_train.py [--config=configs/quickstart.py] [--steps=10] [--config.KEY=VALUE ...]

Times `--steps` steps after `--warmup` on a fixed batch of random tokens (the
data pipeline is not timed), and divides model FLOP/s by a matmul peak measured
in the same run. Figures and machines are recorded in tools/bench_train.md.
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import flax.linen as nn  # pylint: disable=g-import-not-at-top
import jax
import jax.numpy as jnp
import numpy as np

from pretrain import config as config_lib
from pretrain.errors import exit_on_user_error
from pretrain.models.decoder_only import DecoderOnly, DecoderOnlyConfig
from pretrain.parallel import mesh as mesh_lib
from pretrain.train import flops, optimizer, state as state_lib, steps


def random_batch(rows: int, length: int, vocab_size: int) -> dict[str, np.ndarray]:
  tokens = np.random.default_rng(0).integers(3, vocab_size, (rows, length + 1)).astype(np.int32)
  return {"decoder_input_tokens": tokens[:, :-1], "decoder_target_tokens": tokens[:, 1:],
          "decoder_loss_weights": np.ones((rows, length), np.int32),
          "decoder_segment_ids": np.ones((rows, length), np.int32),
          "decoder_positions": np.tile(np.arange(length, dtype=np.int32), (rows, 1))}


def bench(cfg, vocab_size: int, num_steps: int, warmup: int) -> dict:
  model = DecoderOnly(DecoderOnlyConfig.from_config(cfg.model, vocab_size))
  mesh, rules = mesh_lib.make_mesh(cfg.mesh), mesh_lib.rules(cfg.mesh)
  tx = optimizer.make(cfg.optimizer, cfg.train.steps)
  rows, length = cfg.train.batch_size, cfg.data.seq_len
  example = jnp.zeros((1, length), jnp.int32)
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    shardings = state_lib.shardings(model, tx, (example,), mesh, rules)
    batch_sharding = mesh_lib.batch_sharding(mesh, rules)
    state = state_lib.create(model, tx, (example,), shardings, seed=0)
    step = jax.jit(steps.make_train_step(model, tx, optimizer.schedule(cfg.optimizer, cfg.train.steps), cfg.loss),
                   in_shardings=(shardings, batch_sharding), out_shardings=(shardings, None), donate_argnums=0)
    batch = mesh_lib.global_batch(random_batch(rows, length, vocab_size), batch_sharding)
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
  step_seconds = statistics.median(times)
  tokens_per_second = rows * length / step_seconds
  model_flops = flops.flops_per_token(state.params, cfg.model, length) * tokens_per_second
  peak = flops.matmul_peak()
  return {"params": sum(x.size for x in jax.tree.leaves(state.params)),
          "tokens/step": rows * length, "compile s": compile_seconds, "step s": step_seconds,
          "tokens/s": tokens_per_second, "model GFLOP/s": model_flops / 1e9,
          "matmul peak GFLOP/s": peak / 1e9, "MFU": model_flops / peak}


def print_table(rows: dict[str, dict]) -> None:
  names = list(rows)
  keys = list(next(iter(rows.values())))
  width = max(len(k) for k in keys) + 2
  print("".ljust(width) + "".join(n.rjust(16) for n in names))
  for key in keys:
    cells = []
    for name in names:
      value = rows[name][key]
      cells.append((f"{value:,.0f}" if value >= 100 else f"{value:.3f}").rjust(16))
    print(key.ljust(width) + "".join(cells))


@exit_on_user_error
def main(argv):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--warmup", type=int, default=3)
  parser.add_argument("--vocab_size", type=int, default=4096, help="model vocabulary (rows of the embedding)")
  args, cfg = config_lib.parse_command_line(parser, argv)
  config_lib.validate(cfg)
  print(f"{jax.device_count()} x {jax.devices()[0].device_kind}, {os.cpu_count()} CPU cores; "
        f"MFU uses 6N + 12*L*H*Dh*T FLOPs per token (full attention), peak = measured 2048^2 float32 matmul")
  print_table({os.path.basename(args.config): bench(cfg, args.vocab_size, args.steps, args.warmup)})


if __name__ == "__main__":
  main(sys.argv[1:])
