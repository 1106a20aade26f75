"""What a compiled train step says of itself, per device: its memory, its FLOPs and its collectives, read from
the compiler's own analyses and its optimised HLO; and, from a chip's datasheet figures, the roofline bound on its
step time.

XLA's cost analysis counts a loop's body once, however often it runs (the microbatches, the scanned layers), so
the FLOPs and the collectives are read from the optimised HLO instead, each op counted as often as it runs: the
matmul FLOPs of its dots and convolutions (2 per multiply-add, the padding of a convolution's window left out),
which a custom call (a Pallas kernel) hides. The collectives' bytes are what each device must receive, in a group of n devices: an all-gather (n-1)/n of its
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
_DEFINITION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (\w+\[[\d,]*\])")
_NAME = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = ")
_OPERANDS = re.compile(r" (?:dot|convolution)\(%?([\w.\-]+), %?([\w.\-]+)\)")


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


class Program:
  """An optimised HLO module's text, read once: its computations, how often each runs per call of the entry
  (a loop's body as often as its known trip count), and the shape of every named value."""

  def __init__(self, hlo_text: str):
    self.lines, order, current = collections.defaultdict(list), [], None
    self.shapes, self.definitions = {}, {}  # By value name: its shape; the line that defines it.
    for line in hlo_text.splitlines():
      header = _HEADER.match(line)
      if header:
        current = header[1]
        order.append((current, line.startswith("ENTRY")))
      elif current is not None:
        self.lines[current].append(line)
        named = _NAME.match(line)
        if named:
          self.definitions[named[1]] = line
          shaped = _DEFINITION.match(line)
          if shaped:
            self.shapes[named[1]] = shaped[2]
    # Callers follow their callees in the text: from the entry backwards, each computation's count is final
    # before it passes it on.
    self.runs = collections.Counter({name: 1 for name, entry in order if entry})
    self.unknown_loops = 0  # Loops whose trip count neither XLA nor their condition says: counted once.
    for name, _ in reversed(order):
      for line in self.lines[name]:
        callees = dict(_CALLEE.findall(line))
        for field, names in callees.items():
          trips = self._trips(line, callees.get("condition", ""), names) if field == "body" else 1
          for callee in re.findall(r"%?([\w.\-]+)", names):
            self.runs[callee] += self.runs[name] * trips

  def _trips(self, line: str, condition: str, body: str) -> int:
    """A while loop's trip count: XLA's known_trip_count, else read from its code: the condition's
    `counter < N` and the body's `counter + step` (from a start of 0, as JAX's and XLA's loops count)."""
    known = _TRIPS.search(line)
    if known:
      return int(known[1])
    compare = self._root(condition)
    if compare and "direction=LT" in compare:
      counter, limit = (self.definitions.get(name, "") for name in _operands(compare)[:2])
      index, bound = re.search(r"index=(\d+)", counter), re.search(r" constant\((\d+)\)", limit)
      result = self._root(body)
      if index and bound and result and " tuple(" in result:
        update = self.definitions.get(_operands(result)[int(index[1])], "")
        steps = [re.search(r" constant\((\d+)\)", self.definitions.get(name, "")) for name in _operands(update)]
        if " add(" in update and any(steps):
          step = int(next(found for found in steps if found)[1])
          return -(-int(bound[1]) // step)
    self.unknown_loops += 1
    return 1

  def _root(self, computation: str) -> str:
    return next((line for line in self.lines[computation.lstrip("%")] if line.lstrip().startswith("ROOT")), "")

  def instructions(self):
    """(computation, how often it runs, line, result shape, op) of every instruction that runs."""
    for name, lines in self.lines.items():
      if self.runs[name]:
        for line in lines:
          instruction = _INSTRUCTION.match(line)
          if instruction:
            yield name, self.runs[name], line, instruction[1], instruction[2]


def collectives(program: Program) -> dict[str, tuple[int, float]]:
  """{kind: (how many run per step, bytes each device receives per step)}."""
  found = {kind: [0, 0.0] for kind in KINDS}
  for name, times, line, shape, op_name in program.instructions():
    op = op_name.removesuffix("-start")
    sizes = _array_bytes(shape)
    if op not in KINDS or op_name.endswith("-done") or not sizes:
      continue
    n = _group_size(line)
    if op == "all-reduce" and name.startswith("all-reduce-scatter"):  # The TPU compiler's reduce-scatter: an
      op, result = "reduce-scatter", sum(sizes) / max(n, 1)        # all-reduce that keeps one slice.
    else:  # An async start's tuple holds its operand and its result; another op's, one result per operand.
      result = max(sizes) if op_name.endswith("-start") else sum(sizes)
    found[op][0] += times
    found[op][1] += times * _received(op, result, n)
  return {kind: (count, received) for kind, (count, received) in found.items()}


def _operands(line: str) -> list[str]:
  """The names an instruction's operand list holds (its first parenthesis after the op)."""
  inside = re.search(r" [a-z][\w\-]*\((.*?)\)(?:,|$)", line.split(" = ", 1)[1] if " = " in line else line)
  return re.findall(r"%([\w.\-]+)", inside[1]) if inside else []


def _dims(shape: str) -> list[int]:
  return [int(d) for d in _ARRAY.search(shape)[2].split(",") if d]


def _window(text: str, field: str, count: int, default: str) -> list[str]:
  found = re.search(rf"\b{field}=([\d_x]+)", text)
  return found[1].split("x") if found else [default] * count


def _taps(in_size: int, out_size: int, size: int, stride: int, pad_low: int, lhs_dilation: int,
          rhs_dilation: int) -> int:
  """(output position, window tap) pairs of one spatial dimension that read an input element, not padding."""
  count = 0
  for tap in range(size):
    offset = tap * rhs_dilation - pad_low  # Input position of output 0 at this tap, in dilated coordinates.
    if lhs_dilation == 1:  # Outputs j with 0 <= j * stride + offset < in_size.
      first, last = max(0, -(offset // stride)), min(out_size - 1, (in_size - 1 - offset) // stride)
      count += max(0, last - first + 1)
    else:
      count += sum(1 for j in range(out_size) if (p := j * stride + offset) >= 0 and p % lhs_dilation == 0
                   and p // lhs_dilation < in_size)
  return count


def matmul_flops(program: Program) -> float:
  """FLOPs of the program's dots and convolutions per call, each as often as it runs."""
  total = 0.0
  for _, times, line, shape, op in program.instructions():
    if op not in ("dot", "convolution"):
      continue
    operands = _OPERANDS.search(line)
    lhs, rhs = (_dims(program.shapes[name]) for name in operands.groups())
    out = _dims(shape)
    if op == "dot":
      contracting = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", line)
      depth = math.prod(lhs[int(i)] for i in contracting[1].split(",") if i) if contracting else 1
      total += times * 2 * math.prod(out) * depth
      continue
    lhs_labels, rhs_labels, out_labels = re.search(r"dim_labels=(\w+)_(\w+)->(\w+)", line).groups()
    spatial = sorted(label for label in lhs_labels if label.isdigit())
    window = (re.search(r"window=\{([^}]*)\}", line) or [None, ""])[1]
    sizes, strides = _window(window, "size", len(spatial), "1"), _window(window, "stride", len(spatial), "1")
    pads, lhs_dilations = _window(window, "pad", len(spatial), "0_0"), _window(window, "lhs_dilate", len(spatial), "1")
    rhs_dilations = _window(window, "rhs_dilate", len(spatial), "1")
    taps = math.prod(
        _taps(lhs[lhs_labels.index(d)], out[out_labels.index(d)], int(sizes[i]), int(strides[i]),
              int(pads[i].split("_")[0]), int(lhs_dilations[i]), int(rhs_dilations[i]))
        for i, d in enumerate(spatial))
    total += (times * 2 * out[out_labels.index("b")] * out[out_labels.index("f")] * rhs[rhs_labels.index("i")]
              * taps)
  return total


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
  analysis = (analysis[0] if isinstance(analysis, (list, tuple)) else analysis) or {}  # None: no analysis (GPUs)
  return {"flops": float(analysis.get("flops", 0.0)), "bytes accessed": float(analysis.get("bytes accessed", 0.0))}
