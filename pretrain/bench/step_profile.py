"""Where a compiled step spends its time: one step under jax.profiler, the
wall clock shared among XLA's ops (an instant during which k ops run gives
each 1/k of it, so ops that XLA overlaps are not counted twice), split into
matrix multiplications and everything else.
"""

import collections
import glob
import gzip
import json
import os
import re
import tempfile

import jax

_MATMUL_PREFIXES = ("dot", "ynn", "xnn", "onednn", "convolution", "custom-call")


def ops_holding_a_dot(hlo_text: str) -> set[str]:
  """The instructions of a compiled module's HLO text that are a dot or call a computation holding one."""
  bodies, current = collections.defaultdict(list), None
  for line in hlo_text.splitlines():
    header = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
    if header:
      current = header.group(1)
    elif current and line.startswith("  "):
      bodies[current].append(line)
  found = set()
  for lines in bodies.values():
    for line in lines:
      instruction = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = ", line)
      called = re.search(r"calls=%([\w.\-]+)", line)
      if instruction and any(" dot(" in body for body in (bodies.get(called.group(1), []) if called else [line])):
        found.add(instruction.group(1))
  return found


def wall_shares(events) -> tuple[collections.Counter, float, float]:
  """Milliseconds of wall clock per op name (an interval shared by k running ops gives each 1/k), the span from
  the first op's start to the last one's end, and how much of it some op was running."""
  boundaries = sorted([(e["ts"], 1, i) for i, e in enumerate(events)] +
                      [(e["ts"] + e["dur"], 0, i) for i, e in enumerate(events)])
  shares, running, busy, last = collections.Counter(), set(), 0.0, None
  for time, starts, i in boundaries:
    if running:
      interval = (time - last) / 1e3
      busy += interval
      for j in running:
        shares[events[j]["name"]] += interval / len(running)
    last = time
    (running.add if starts else running.discard)(i)
  span = (boundaries[-1][0] - boundaries[0][0]) / 1e3 if boundaries else 0.0
  return shares, span, busy


def profile(run_step, hlo_text: str = "", top: int = 12) -> list[tuple[str, float]]:
  """Runs `run_step()` (which must block until done) once under the profiler; returns rows (name, milliseconds
  of the step's wall clock): matrix multiplications, all other ops, the time with no op running (XLA's
  asynchronous dots work then: their events end when they are dispatched), then the `top` costliest ops that
  are not matrix multiplications. With the compiled step's `hlo_text`, an op is a matrix multiplication when
  it holds a dot; without it, by its name."""
  with tempfile.TemporaryDirectory() as directory:
    with jax.profiler.trace(directory, create_perfetto_trace=True):
      run_step()
    path = glob.glob(os.path.join(directory, "**", "perfetto_trace.json.gz"), recursive=True)[0]
    with gzip.open(path) as f:
      trace = json.load(f)
  events = trace["traceEvents"] if isinstance(trace, dict) else trace
  # XLA's ops carry the name of their HLO instruction; the runtime's own spans and Python frames do not.
  ops = [e for e in events if e.get("ph") == "X" and "hlo_op" in (e.get("args") or {})]
  shares, span, busy = wall_shares(ops)
  dots = ops_holding_a_dot(hlo_text) if hlo_text else None
  is_matmul = (lambda name: name in dots) if hlo_text else (lambda name: name.startswith(_MATMUL_PREFIXES))
  others = collections.Counter({k: v for k, v in shares.items() if not is_matmul(k)})
  return [("matrix multiplications", sum(v for k, v in shares.items() if is_matmul(k))),
          ("all other ops", sum(others.values())), ("no op running", span - busy), *others.most_common(top)]
