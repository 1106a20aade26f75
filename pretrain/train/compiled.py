"""What a compiled train step says of itself, per device: its memory, its FLOPs and its collectives, read from
the compiler's own analyses and its optimised HLO; and, from a chip's datasheet figures, the roofline bound on its
step time.

The collectives are counted as often as they run: an op inside a loop (scanned layers) counts once per
iteration. Their bytes are what each device must receive, in a group of n devices: an all-gather (n-1)/n of its
result, a reduce-scatter n-1 times its result, an all-reduce twice (n-1)/n of its buffer (a reduce-scatter then
an all-gather), an all-to-all (n-1)/n of it, a collective-permute all of it.
"""

import collections
import dataclasses
import math
import re

KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")
_BYTES = {"pred": 1, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4,
          "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8, "c64": 8, "c128": 16}
_ARRAY = re.compile(r"\b([a-z]+\d*(?:e\d+m\d+\w*)?)\[([\d,]*)\]")
_HEADER = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) \(.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?[\w.\-]+ = (.*?) ([a-z][\w\-]*)\(")
_CALLEE = re.compile(r"\b(calls|to_apply|body|condition|branch_computations|called_computations)="
                     r"(\{[^}]*\}|%?[\w.\-]+)")
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def _array_bytes(shape_text: str) -> list[float]:
  """Bytes of each array of an HLO shape (an array, or a tuple of them)."""
  sizes = []
  for dtype, dims in _ARRAY.findall(shape_text):
    width = _BYTES.get(dtype, 1 if dtype.startswith("f8") else None)
    if width is not None:
      sizes.append(width * math.prod(int(d) for d in dims.split(",") if d))
  return sizes


def _group_size(line: str) -> int:
  """Devices in each group of a collective, from its replica_groups (any of XLA's three spellings)."""
  mesh = re.search(r"replica_groups=mesh\[([^\]]*)\].*?\{([^}]*)\}", line)
  if mesh:
    sizes = dict(re.findall(r"'(\w+)'=(\d+)", mesh[1]))
    return math.prod(int(sizes[a]) for a in re.findall(r"'(\w+)'", mesh[2]))
  iota = re.search(r"replica_groups=\[([\d,]+)\]<=", line)
  if iota:
    return int(iota[1].split(",")[-1])
  listed = re.search(r"replica_groups=\{\{([\d,]*)\}", line)
  return len(listed[1].split(",")) if listed and listed[1] else 1


def _received(kind: str, result: float, n: int) -> float:
  """Bytes one device receives in a collective of `result` bytes (its output) over n devices."""
  if kind == "collective-permute":
    return result
  if n <= 1:
    return 0.0
  return {"all-gather": result * (n - 1) / n, "reduce-scatter": result * (n - 1),
          "all-reduce": 2 * result * (n - 1) / n, "all-to-all": result * (n - 1) / n}[kind]


def collectives(hlo_text: str) -> dict[str, tuple[int, float]]:
  """{kind: (how many run per step, bytes each device receives per step)} of an optimised HLO module's text."""
  computations, order = collections.defaultdict(list), []
  current = None
  for line in hlo_text.splitlines():
    header = _HEADER.match(line)
    if header:
      current = header[1]
      order.append((current, line.startswith("ENTRY")))
    elif current is not None:
      computations[current].append(line)
  # Callers follow their callees in the text: from the entry backwards, each computation's count is final before
  # it passes it on.
  runs = collections.Counter({name: 1 for name, entry in order if entry})
  found = {kind: [0, 0.0] for kind in KINDS}
  for name, _ in reversed(order):
    times = runs[name]
    if not times:
      continue
    for line in computations[name]:
      trips = _TRIPS.search(line)
      for field, callees in _CALLEE.findall(line):
        for callee in re.findall(r"%?([\w.\-]+)", callees):
          runs[callee] += times * (int(trips[1]) if field == "body" and trips else 1)
      instruction = _INSTRUCTION.match(line)
      if not instruction:
        continue
      op = instruction[2].removesuffix("-start")
      sizes = _array_bytes(instruction[1])
      if op not in KINDS or not sizes:
        continue
      n = _group_size(line)
      if op == "all-reduce" and name.startswith("all-reduce-scatter"):  # The TPU compiler's reduce-scatter: an
        op, result = "reduce-scatter", sum(sizes) / max(n, 1)        # all-reduce that keeps one slice.
      else:  # An async start's tuple holds its operand and its result; another op's, one result per operand.
        result = max(sizes) if instruction[2].endswith("-start") else sum(sizes)
      found[op][0] += times
      found[op][1] += times * _received(op, result, n)
  return {kind: (count, received) for kind, (count, received) in found.items()}


@dataclasses.dataclass
class Roofline:
  """A lower bound on the step time: the longest of its compute at the chip's peak, its memory traffic at the
  HBM's bandwidth and its collectives at the chip's ICI bandwidth (each alone, as if the others overlapped)."""
  compute_s: float
  memory_s: float
  collectives_s: float

  @property
  def step_s(self) -> float:
    return max(self.compute_s, self.memory_s, self.collectives_s)

  @property
  def limit(self) -> str:
    return max((self.compute_s, "compute"), (self.memory_s, "HBM bandwidth"), (self.collectives_s, "ICI"))[1]


def roofline(chip, flops: float, bytes_accessed: float, received: float) -> Roofline:
  """The bound of one device's step on `chip` (pretrain.parallel.tpu.Chip). Its ICI bandwidth counts both
  directions: a device receives at half of it."""
  return Roofline(flops / chip.bf16_flops, bytes_accessed / chip.hbm_bandwidth, received / (chip.ici_bandwidth / 2))


def cost(compiled) -> dict[str, float]:
  """The compiler's cost analysis of one device's program (a dict, or a list of one in older JAX)."""
  analysis = compiled.cost_analysis()
  analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
  return {"flops": float(analysis.get("flops", 0.0)), "bytes accessed": float(analysis.get("bytes accessed", 0.0))}
