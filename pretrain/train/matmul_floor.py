"""The step's matrix products alone: every dot_general of a function's jaxpr
(its gradient, rematerialised and scanned layers included), each compiled by
itself and timed here. Their sum is a floor for the step with this machine's
matmul kernels: what would be left if every other op took no time. The same
products through torch (torch.einsum) show whether the two libraries'
kernels differ on these shapes.
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

  @property
  def flops(self) -> int:
    (lhs_contract, _), (lhs_batch, _) = self.dimension_numbers
    kept = [d for i, d in enumerate(self.lhs_shape) if i not in lhs_contract]
    (_, rhs_contract), (_, rhs_batch) = self.dimension_numbers
    rhs_free = [d for i, d in enumerate(self.rhs_shape) if i not in rhs_contract and i not in rhs_batch]
    contracted = [self.lhs_shape[i] for i in lhs_contract]
    return 2 * math.prod(kept) * math.prod(rhs_free) * math.prod(contracted)

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


def time_with_jax(dot: Dot, repeats: int) -> float:
  """Seconds of `dot` compiled alone by XLA, on random operands (the best of `repeats`)."""
  rng = np.random.default_rng(0)
  lhs, rhs = (jnp.asarray(rng.standard_normal(s, np.float32), dot.dtype) for s in (dot.lhs_shape, dot.rhs_shape))
  product = jax.jit(lambda a, b: jax.lax.dot_general(a, b, dot.dimension_numbers,
                                                     preferred_element_type=np.dtype(dot.output_dtype)))
  return _best_seconds(lambda: product(lhs, rhs).block_until_ready(), repeats)


def einsum_spec(dot: Dot) -> str:
  """The dot as an einsum string (output: batch, lhs free, rhs free axes, dot_general's order)."""
  (lc, rc), (lb, rb) = dot.dimension_numbers
  letters = iter("abcdefghijklmnopqrstuvwxyz")
  lhs = [next(letters) for _ in dot.lhs_shape]
  rhs = [None] * len(dot.rhs_shape)
  for i, j in zip(lc + lb, rc + rb):
    rhs[j] = lhs[i]
  rhs = [r or next(letters) for r in rhs]
  out = [lhs[i] for i in lb] + [lhs[i] for i in range(len(lhs)) if i not in lc + lb]
  out += [rhs[j] for j in range(len(rhs)) if j not in rc + rb]
  return f"{''.join(lhs)},{''.join(rhs)}->{''.join(out)}"


def time_with_torch(dot: Dot, repeats: int) -> float:
  """Seconds of `dot` as torch.einsum on random float32 operands (the best of `repeats`)."""
  import torch  # pylint: disable=g-import-not-at-top  (only for the comparison)
  lhs, rhs = torch.randn(dot.lhs_shape), torch.randn(dot.rhs_shape)
  spec = einsum_spec(dot)
  return _best_seconds(lambda: torch.einsum(spec, lhs, rhs), repeats)


def floor(dots: collections.Counter, repeats: int = 3, with_torch: bool = False) -> list[dict]:
  """A row per Dot, costliest first: its count, GFLOP and total seconds in XLA (and torch)."""
  rows = []
  for dot, count in dots.items():
    row = {"dot": dot.describe(), "count": count, "GFLOP": dot.flops * count / 1e9,
           "jax s": time_with_jax(dot, repeats) * count}
    if with_torch:
      row["torch s"] = time_with_torch(dot, repeats) * count
    rows.append(row)
  return sorted(rows, key=lambda r: -r["jax s"])
