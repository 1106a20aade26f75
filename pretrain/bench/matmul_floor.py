"""The step's matrix products alone: every dot_general of a function's jaxpr
(its gradient, rematerialised and scanned layers included), each compiled by
itself and timed here, as the step writes it and as a plain [batch, rows,
contracted] x [batch, contracted, columns] matmul in XLA and in torch. The sum
of each product's fastest time is a floor for the step with this machine's
matmul kernels: what would be left if every other op, layout copies included,
took no time.
"""

import collections
import math
import time
from typing import NamedTuple

import jax
import jax.extend as jex
import jax.numpy as jnp
import numpy as np


class Dot(NamedTuple):
  """One dot_general: operand shapes and dtypes, dimension numbers and the output dtype."""
  lhs_shape: tuple
  rhs_shape: tuple
  dtype: str
  dimension_numbers: tuple
  output_dtype: str

  def sizes(self) -> tuple[int, int, int, int]:
    """(batch, rows, contracted, columns): the product as [batch, rows, contracted] x [batch, contracted, columns]."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = self.dimension_numbers
    size = lambda shape, axes: math.prod(shape[i] for i in axes)
    rows = size(self.lhs_shape, [i for i in range(len(self.lhs_shape)) if i not in lhs_contract + lhs_batch])
    columns = size(self.rhs_shape, [i for i in range(len(self.rhs_shape)) if i not in rhs_contract + rhs_batch])
    return size(self.lhs_shape, lhs_batch), rows, size(self.lhs_shape, lhs_contract), columns

  @property
  def flops(self) -> int:
    return 2 * math.prod(self.sizes())

  def describe(self) -> str:
    (lc, rc), (lb, rb) = self.dimension_numbers
    return f"{list(self.lhs_shape)} x {list(self.rhs_shape)} contract {list(lc)},{list(rc)} batch {list(lb)},{list(rb)}"


def dots_of(closed_jaxpr) -> collections.Counter:
  """How many times each Dot runs in `closed_jaxpr` (a scan's body counts once per iteration, a cond's
  costliest branch once)."""
  counts = collections.Counter()

  def walk(jaxpr, times: int) -> collections.Counter:
    found = collections.Counter()
    for eqn in jaxpr.eqns:
      if eqn.primitive.name == "dot_general":
        lhs, rhs = (v.aval for v in eqn.invars)
        contract, batch = eqn.params["dimension_numbers"]
        numbers = (tuple(map(tuple, contract)), tuple(map(tuple, batch)))
        output = eqn.params.get("preferred_element_type") or eqn.outvars[0].aval.dtype
        found[Dot(lhs.shape, rhs.shape, str(lhs.dtype), numbers, str(np.dtype(output)))] += times
        continue
      subs = [sub.jaxpr if hasattr(sub, "jaxpr") else sub for sub in jex.core.jaxprs_in_params(eqn.params)]
      if eqn.primitive.name == "cond":
        branches = [walk(sub, times) for sub in subs]
        found += max(branches, key=lambda c: sum(d.flops * n for d, n in c.items()), default=collections.Counter())
        continue
      repeat = eqn.params["length"] if eqn.primitive.name == "scan" else 1
      for sub in subs:
        found += walk(sub, times * repeat)
    return found

  counts += walk(closed_jaxpr.jaxpr, 1)
  return counts


def _best_seconds(call, repeats: int) -> float:
  """The fastest of `repeats` calls after a first (a floor: the machine's noise only ever adds time)."""
  call()
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    call()
    best = min(best, time.perf_counter() - start)
  return best


def _plain_shapes(dot: Dot) -> tuple[tuple, tuple]:
  batch, rows, contracted, columns = dot.sizes()
  lead = (batch,) if batch > 1 else ()
  return (*lead, rows, contracted), (*lead, contracted, columns)


def time_with_jax(dot: Dot, repeats: int, as_written: bool = True) -> float:
  """Seconds of `dot` compiled alone by XLA on random operands, as written or as a plain matmul (the best of
  `repeats`)."""
  rng = np.random.default_rng(0)
  shapes = (dot.lhs_shape, dot.rhs_shape) if as_written else _plain_shapes(dot)
  lhs, rhs = (jnp.asarray(rng.standard_normal(s, np.float32), dot.dtype) for s in shapes)
  output = np.dtype(dot.output_dtype)
  if as_written:
    product = jax.jit(lambda a, b: jax.lax.dot_general(a, b, dot.dimension_numbers, preferred_element_type=output))
  else:
    product = jax.jit(lambda a, b: jnp.matmul(a, b, preferred_element_type=output))
  return _best_seconds(lambda: product(lhs, rhs).block_until_ready(), repeats)


def time_with_torch(dot: Dot, repeats: int) -> float:
  """Seconds of `dot` as a plain float32 torch.matmul on random operands (the best of `repeats`)."""
  import torch  # pylint: disable=g-import-not-at-top  (only for the comparison)
  lhs, rhs = (torch.randn(s) for s in _plain_shapes(dot))
  return _best_seconds(lambda: torch.matmul(lhs, rhs), repeats)


def floor(dots: collections.Counter, repeats: int = 3, with_torch: bool = False) -> list[dict]:
  """A row per Dot, costliest first: its count, GFLOP, and seconds for all of its count in XLA as written,
  in XLA as a plain matmul (and in torch as a plain matmul), and the best of them."""
  rows = []
  for dot, count in dots.items():
    row = {"dot": dot.describe(), "count": count, "GFLOP": dot.flops * count / 1e9,
           "XLA s": time_with_jax(dot, repeats) * count,
           "XLA plain s": time_with_jax(dot, repeats, as_written=False) * count}
    if with_torch:
      row["torch plain s"] = time_with_torch(dot, repeats) * count
    row["best s"] = min(v for k, v in row.items() if k.endswith(" s"))
    rows.append(row)
  return sorted(rows, key=lambda r: -r["best s"])
