"""Where a compiled step spends its time: one step under jax.profiler, its
XLA ops summed by name from the Perfetto trace, split into matrix
multiplications (dot and YNNPACK/XNNPACK/oneDNN fusions) and everything else.
"""

import collections
import glob
import gzip
import json
import os
import tempfile

import jax

_MATMUL_PREFIXES = ("dot", "ynn", "xnn", "onednn", "convolution", "custom-call")


def profile(run_step, top: int = 12) -> list[tuple[str, float]]:
  """Runs `run_step()` (which must block until done) once under the profiler;
  returns rows (name, milliseconds): the two totals, then the `top` slowest
  ops that are not matrix multiplications. Op times are summed over the
  threads that ran them."""
  with tempfile.TemporaryDirectory() as directory:
    with jax.profiler.trace(directory, create_perfetto_trace=True):
      run_step()
    path = glob.glob(os.path.join(directory, "**", "perfetto_trace.json.gz"), recursive=True)[0]
    with gzip.open(path) as f:
      trace = json.load(f)
  events = trace["traceEvents"] if isinstance(trace, dict) else trace
  totals = collections.Counter()
  for event in events:
    name = event.get("name", "")
    # XLA's ops, not the Python frames ($...) or the runtime's own spans (Class::method).
    if event.get("ph") == "X" and not name.startswith("$") and "::" not in name:
      totals[name] += event.get("dur", 0) / 1e3
  matmul = sum(v for k, v in totals.items() if k.startswith(_MATMUL_PREFIXES))
  others = collections.Counter({k: v for k, v in totals.items() if not k.startswith(_MATMUL_PREFIXES)})
  return [("matrix multiplications", matmul), ("all other ops", sum(others.values())),
          *others.most_common(top)]
