"""Compile a config's train step for a TPU slice, on this machine, and say whether it fits and how fast it can be.

  pretrain compile --topology=v5p-128 [--slices=2] [--config=lm_7b] [--config.KEY=VALUE ...] [--json=FILE]
  pretrain compile --topology=h100-64 ...      (GPUs: pip install -e '.[gpu-compile]')

Builds the run as it would run on that slice (its mesh over the slice's chips, the attention, dtypes and
experts' matmul a TPU run chooses) and compiles the same train step, from abstract inputs: libtpu's compiler,
nothing allocated, no TPU needed (pip install -e '.[tpu]'). Prints per device: memory against the chip's HBM,
the compiler's FLOPs beside the model-FLOPs formula that MFU uses, the collectives by kind, and a roofline
bound on the step time (so an upper bound on MFU) from the chip's datasheet. Exits 1 when the step does not fit
(over the chip's HBM, or refused by XLA for its memory), with --json's "fits": false; 2 for any other error.
--topology takes an accelerator type (v4-32, v5p-128, v5litepod-16, v6e-256) or a topology (v5p:4x4x4).
"""

import json
import re
import sys
import time

from pretrain import cli
from pretrain.parallel import gpu, tpu
from pretrain.system import files
from pretrain.system.errors import UserError, exit_on_user_error


def _gib(n: float) -> str:
  return f"{n / 2**30:,.2f} GiB" if n >= 2**27 else f"{n / 2**20:,.1f} MiB"


class DoesNotFit(UserError):
  """XLA refused to compile the step for the chip's memory (RESOURCE_EXHAUSTED): no figures, but the same verdict
  as a step that compiles over the chip's HBM."""

  def __init__(self, target: str, message: str):
    super().__init__(f"{target}: the step does not fit: {message}", _FIT_FIX)
    self.facts = {"target": target, "fits": False, "error": message}


_FIT_FIX = "raise train.microbatches, set model.remat=full, or shard over more chips (mesh.fsdp)"


def check(cfg, target) -> dict:
  """The compiled facts of `cfg`'s train step on `target`: a dict of plain numbers (what --json writes)."""
  import jax  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
  # pylint: disable-next=g-import-not-at-top  (not for --help)
  from jax.experimental.compilation_cache import compilation_cache
  from pretrain import run as run_lib  # pylint: disable=g-import-not-at-top  (not for --help)
  from pretrain.models import attention  # pylint: disable=g-import-not-at-top  (not for --help)
  from pretrain.train import compiled as compiled_lib, memory  # pylint: disable=g-import-not-at-top  (not for --help)
  if cfg.model.attention == "gpu_flash" and target.platform == "tpu":
    raise UserError("model.attention=gpu_flash is the GPU kernel, which a TPU cannot run; use auto (splash on "
                    "TPUs), splash or xla")
  if cfg.model.attention == "splash" and target.platform == "gpu":
    raise UserError("model.attention=splash is the TPU kernel, which a GPU cannot run; use auto (gpu_flash on "
                    "GPUs), gpu_flash or xla")
  devices = target.devices()
  run = run_lib.Run.build(cfg, devices=devices)
  start = time.time()
  abstract = run.abstract_state()
  # Not through JAX's persistent cache: its entries load on the machine that compiled them, not this one. JAX
  # decides once per process whether it uses the cache: reset, so that it decides again, now and after.
  cached = jax.config.jax_enable_compilation_cache
  compilation_cache.reset_cache()
  jax.config.update("jax_enable_compilation_cache", False)
  with run.activated():
    try:
      executable = run.train_step.lower(abstract, run.abstract_batch()).compile()
    except jax.errors.JaxRuntimeError as e:
      message = str(e).splitlines()[0]
      if "RESOURCE_EXHAUSTED" in message:
        raise DoesNotFit(target.describe(), message) from None
      raise UserError(f"{target.describe()}: XLA cannot compile the step: {message}") from None
    finally:
      jax.config.update("jax_enable_compilation_cache", cached)
      compilation_cache.reset_cache()
    chosen = {attention.choose(run.cfg.model.attention, q, k, **what)
              for q, k, _, what in run.family.attentions(run.cfg.model, run.task_lengths)}
  seconds = time.time() - start
  stats, cost = executable.memory_analysis(), compiled_lib.cost(executable)
  params, opt_state = memory.shard_bytes(abstract.params), memory.shard_bytes(abstract.opt_state)
  parts = {"parameters": params, "optimizer state": opt_state,
           "batch and other inputs": stats.argument_size_in_bytes - params - opt_state,
           "outputs not donated": stats.output_size_in_bytes - stats.alias_size_in_bytes,
           "temporaries": stats.temp_size_in_bytes, "generated code": stats.generated_code_size_in_bytes}
  total = sum(parts.values())
  model_flops = run.flops_per_example(abstract.params) * cfg.train.batch_size / len(devices)
  kernel_flops = _kernel_attention_flops(run) / len(devices)
  text = executable.as_text()
  program = compiled_lib.Program(text)
  matmul_flops = compiled_lib.matmul_flops(program)
  flops = matmul_flops + kernel_flops
  collectives = compiled_lib.collectives(program)
  bound = compiled_lib.roofline(target.chip, flops, cost["bytes accessed"],
                                sum(received for _, received in collectives.values()))
  return {
      "target": target.describe(), "topology": target.topology, "slices": target.slices,
      "devices": len(devices), "mesh": dict(run.mesh.shape), "chip": target.chip.name,
      "attention": sorted(chosen), "kernel_calls": len(re.findall(r'custom_call_target="(?:tpu_custom_call|__gpu\$xla\.gpu\.triton)"', text)), "dtype": run.model.config.dtype, "remat": cfg.model.remat,
      "microbatches": cfg.train.microbatches, "compile_seconds": round(seconds, 1),
      "memory": parts, "total": total, "hbm": target.chip.hbm_bytes, "fits": total <= target.chip.hbm_bytes,
      "loops_counted_once": program.unknown_loops, "compiler_flops": matmul_flops, "xla_cost_analysis_flops": cost["flops"], "kernel_attention_flops": kernel_flops, "model_flops": model_flops,
      "flops_ratio": flops / model_flops if model_flops else 0.0, "bytes_accessed": cost["bytes accessed"],
      "collectives": {kind: {"count": count, "bytes": received} for kind, (count, received) in collectives.items()},
      "roofline": {"compute_s": bound.compute_s, "memory_s": bound.memory_s, "collectives_s": bound.collectives_s,
                   "step_s": bound.step_s, "limit": bound.limit},
      "mfu_bound": model_flops / (bound.step_s * target.chip.bf16_flops) if bound.step_s else 0.0,
  }


def _kernel_attention_flops(run) -> float:
  """The attention FLOPs of the whole batch that a kernel (a custom call, which the compiler's cost analysis does
  not see) computes: the formula's 12 x heads x head_dim per query-key pair and layer, forward and backward."""
  from pretrain.models import attention  # pylint: disable=g-import-not-at-top  (not for --help)
  m = run.cfg.model
  total = 0.0
  with run.activated():
    for query, key, layers, what in run.family.attentions(m, run.task_lengths):
      if attention.choose(m.attention, query, key, **what) != "xla":
        total += 12 * m.num_heads * m.head_dim * query * key * layers
  return total * run.cfg.train.batch_size


def report(facts: dict) -> str:
  """The facts as the command prints them."""
  m, r = facts["memory"], facts["roofline"]
  lines = [f"{facts['target']}: mesh {facts['mesh']}, attention {', '.join(facts['attention'])}, "
           f"{facts['dtype']} activations, remat {facts['remat']}, {facts['microbatches']} microbatch(es); compiled "
           f"in {facts['compile_seconds']:.1f} s", "memory per device:"]
  lines += [f"  {name:24s} {_gib(value):>12s}" for name, value in m.items()]
  verdict = "fits" if facts["fits"] else "DOES NOT FIT"
  lines.append(f"  {'total':24s} {_gib(facts['total']):>12s}  of {_gib(facts['hbm'])} HBM: {verdict} "
               f"({facts['total'] / facts['hbm']:.0%})")
  kernel = (f" + {facts['kernel_attention_flops']:.3g} of kernel attention (formula)"
            if facts["kernel_attention_flops"] else "")
  xla = (f" (XLA's cost analysis, a loop's body once: {facts['xla_cost_analysis_flops']:.4g})"
         if facts["xla_cost_analysis_flops"] else " (no cost analysis from this compiler)")
  lines.append(f"FLOPs per device per step: compiled matmuls {facts['compiler_flops']:.4g}{kernel}; model formula "
               f"(MFU's) {facts['model_flops']:.4g}; ratio {facts['flops_ratio']:.3f}{xla}")
  if facts["loops_counted_once"]:
    lines.append(f"  ({facts['loops_counted_once']} loop(s) of unknown trip count counted once: a lower bound)")
  lines.append("collectives per step (bytes each device receives):")
  for kind, c in facts["collectives"].items():
    lines.append(f"  {kind:20s} {c['count']:6d} ops  {_gib(c['bytes']):>12s}")
  traffic = ("XLA's count, a loop's body once" if facts["bytes_accessed"] else "not analysed by this compiler, taken "
             "as 0")
  lines.append(f"roofline per step (HBM traffic: {traffic}; a lower bound):")
  lines.append(f"  compute {r['compute_s'] * 1e3:.2f} ms, HBM {r['memory_s'] * 1e3:.2f} ms, ICI "
               f"{r['collectives_s'] * 1e3:.2f} ms: at least {r['step_s'] * 1e3:.2f} ms ({r['limit']}-bound), "
               f"so MFU at most {facts['mfu_bound']:.1%}")
  return "\n".join(lines)


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain compile") -> int:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--topology", required=True, help=f"the TPU slice: {tpu.KNOWN}; or h100-N, N H100 GPUs")
  parser.add_argument("--slices", type=cli.at_least(1), default=1,
                      help="slices joined over the data-center network (multislice; set mesh.dcn_* to span them)")
  parser.add_argument("--json", type=cli.output_file, help="also write the figures to this JSON file")
  args, cfg = cli.parse_command_line(parser, argv)
  target = gpu.target(args.topology, args.slices) or tpu.target(args.topology, args.slices)
  try:
    facts = check(cfg, target)
  except DoesNotFit as e:  # XLA's refusal: the same exit status and --json verdict as a step over the HBM.
    facts, refused = e.facts, str(e)
  else:
    print(report(facts), flush=True)
    refused = (f"{facts['target']}: the step does not fit: it needs {_gib(facts['total'])} per device, over the "
               f"chip's {_gib(facts['hbm'])}; {_FIT_FIX}")
  if args.json:
    files.write_atomically(args.json, json.dumps(facts, indent=1).encode())  # Its missing folders made.
  if not facts["fits"]:
    print(f"error: {refused}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
