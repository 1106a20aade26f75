"""Per-layer views of parameters that are stacked (nn.scan) or unrolled."""

import numpy as np


def unstack(params: dict, scanned: str, unrolled: str, count: int, unit: int = 1) -> list[dict]:
  """The parameters of each layer: slices of `params[scanned]`, or `params[unrolled.format(i)]`. A scan over units
  of `unit` layers (every unit-th one with experts: models.layers.repeat) holds layer i as slice i // unit of
  `params[scanned]['block_{i % unit}']`."""
  if scanned in params:
    if unit > 1:
      return [_map(lambda x, i=i: x[i // unit], params[scanned][f"block_{i % unit}"]) for i in range(count)]
    return [_map(lambda x, i=i: x[i], params[scanned]) for i in range(count)]
  return [params[unrolled.format(i)] for i in range(count)]


def stack(per_layer: list[dict], scanned: str, unrolled: str, scan: bool, unit: int = 1) -> dict:
  """The inverse of `unstack`, in the layout the model config asks for."""
  if scan and unit > 1:
    return {scanned: {f"block_{j}": _map(lambda *xs: np.stack(xs), *per_layer[j::unit]) for j in range(unit)}}
  if scan:
    return {scanned: _map(lambda *xs: np.stack(xs), *per_layer)}
  return {unrolled.format(i): p for i, p in enumerate(per_layer)}


def _map(fn, tree, *rest):
  if isinstance(tree, dict):
    return {k: _map(fn, v, *(r[k] for r in rest)) for k, v in tree.items()}
  return fn(tree, *rest)
