"""Per-device memory of a config and mesh, before anything is allocated.

  pretrain estimate-memory [--config=configs/quickstart.py] [--devices=8] [--config.mesh.fsdp=8 ...]

Prints the bytes each device holds for parameters and optimizer state (their
shards under the config's mesh and rules) and, unless --no_compile, the
temporaries (activations, gradients, workspace) XLA assigns to the compiled
train step. --devices fakes that many CPU devices, to size a mesh you do not
have; XLA's temporaries are then the CPU compiler's, an estimate for others.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pretrain import command_line  # pylint: disable=g-import-not-at-top
from pretrain import config as config_lib  # pylint: disable=g-import-not-at-top
from pretrain.errors import exit_on_user_error  # pylint: disable=g-import-not-at-top


def _gib(n: int) -> str:
  return f"{n / 2**30:,.3f} GiB" if n >= 2**27 else f"{n / 2**20:,.2f} MiB"


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain estimate-memory") -> None:
  parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--devices", type=int, help="fake this many CPU devices (set before JAX starts)")
  parser.add_argument("--vocab_size", type=int, default=0, help="vocabulary size (default: tokenizer.vocab_size)")
  parser.add_argument("--no_compile", action="store_true", help="skip XLA's estimate of the step's temporaries")
  args, cfg = command_line.parse_command_line(parser, argv)
  config_lib.validate(cfg)
  if args.devices:
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + f" --xla_force_host_platform_device_count={args.devices}")
  import jax  # pylint: disable=g-import-not-at-top
  from pretrain import models  # pylint: disable=g-import-not-at-top
  from pretrain.data import objectives, pipeline  # pylint: disable=g-import-not-at-top
  from pretrain.parallel import mesh as mesh_lib  # pylint: disable=g-import-not-at-top
  from pretrain.train import memory  # pylint: disable=g-import-not-at-top

  objective = objectives.make(cfg.data.objective, cfg.data, cfg.train.seed)
  vocab_size = args.vocab_size or cfg.model.get("vocab_size") or cfg.tokenizer.vocab_size
  model = models.build(cfg.model, vocab_size, objective.converter)
  lengths = pipeline.feature_lengths(cfg.data, objective)
  sizes = dict(zip(mesh_lib.AXES, mesh_lib.mesh_shape(cfg.mesh, jax.device_count())))
  result = memory.estimate(cfg, model, lengths, compile_step=not args.no_compile)
  print(f"{type(model).__name__}, {jax.device_count()} x {jax.devices()[0].device_kind}, mesh {sizes}, "
        f"batch {cfg.train.batch_size} x {lengths}")
  print("per device:")
  for name, value in result.items():
    print(f"  {name:30s} {_gib(value):>14s}  ({value:,} bytes)")
  print(f"  {'total':30s} {_gib(sum(result.values())):>14s}")


if __name__ == "__main__":
  main(sys.argv[1:])
