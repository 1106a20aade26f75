"""Per-device memory of a config and mesh, before anything is allocated.

  pretrain estimate-memory [--config=quickstart] [--devices=8] [--config.mesh.fsdp=8 ...]

Prints the bytes each device holds for parameters and optimizer state (their
shards under the config's mesh and rules) and, unless --no_compile, the
temporaries (activations, gradients, workspace) XLA assigns to the compiled
train step; then the attention's share of the activations, by implementation
(model.attention): the XLA path keeps [L, S] scores, a kernel one value per query; and, under a stage
axis, the pipeline's stage inputs of every iteration. --devices fakes that many CPU devices, to size a mesh you do not
have; XLA's temporaries are then the CPU compiler's, an estimate for others.
"""

import os
import sys

from pretrain import cli
from pretrain.system.errors import exit_on_user_error


def _gib(n: int) -> str:
  return f"{n / 2**30:,.3f} GiB" if n >= 2**27 else f"{n / 2**20:,.2f} MiB"


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain estimate-memory") -> None:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--devices", type=cli.at_least(1), help="fake this many CPU devices (set before JAX starts)")
  parser.add_argument("--vocab_size", type=cli.at_least(0), default=0,
                      help="vocabulary size, in place of model.vocab_size (default: model.vocab_size, else "
                           "tokenizer.vocab_size)")
  parser.add_argument("--no_compile", action="store_true", help="skip XLA's estimate of the step's temporaries")
  args, cfg = cli.parse_command_line(parser, argv)
  import jax  # pylint: disable=g-import-not-at-top  (not for --help)
  if args.devices:  # Before the backends start (the config's parsing imported JAX, but started none).
    jax.config.update("jax_platforms", "cpu")  # JAX read $JAX_PLATFORMS as it was imported: too early to set.
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + f" --xla_force_host_platform_device_count={args.devices}")
  from pretrain import run as run_lib  # pylint: disable=g-import-not-at-top  (not for --help)
  from pretrain.parallel import mesh as mesh_lib  # pylint: disable=g-import-not-at-top  (not for --help)
  from pretrain.train import memory  # pylint: disable=g-import-not-at-top  (not for --help)

  if args.vocab_size:  # The model's size wins over the vocabulary's (a padded one): the flag stands in for it.
    cfg.model.vocab_size = args.vocab_size
  run = run_lib.Run.build(cfg, args.vocab_size)
  sizes = dict(zip(mesh_lib.AXES, mesh_lib.mesh_shape(cfg.mesh, jax.device_count())))
  result = memory.estimate(run, compile_step=not args.no_compile)
  print(f"{run.family.name} ({type(run.model).__name__}), {jax.device_count()} x {jax.devices()[0].device_kind}, "
        f"mesh {sizes}, batch {cfg.train.batch_size} x {run.task_lengths}, {cfg.train.microbatches} microbatches")
  print("per device:")
  for name, value in result.items():
    print(f"  {name:30s} {_gib(value):>14s}  ({value:,} bytes)")
  print(f"  {'total':30s} {_gib(sum(result.values())):>14s}")
  print("attention, kept for the backward pass (part of the activations), by implementation:")
  for name, value in memory.attention_scores(run).items():
    print(f"  {name:30s} {_gib(value):>14s}  ({value:,} bytes)")
  if run.pipeline:
    value, name = memory.pipeline_inputs(run), f"{run.pipeline.iterations(run.pipeline.microbatches)} iterations"
    print("pipeline, each iteration's stage input kept for the backward pass (part of the activations):")
    print(f"  {name:30s} {_gib(value):>14s}  ({value:,} bytes)")


if __name__ == "__main__":
  main(sys.argv[1:])
