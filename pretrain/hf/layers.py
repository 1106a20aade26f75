"""Per-layer views of parameters that are stacked (nn.scan) or unrolled."""

import numpy as np


def unstack(params: dict, scanned: str, unrolled: str, count: int) -> list[dict]:
  """The parameters of each layer: slices of `params[scanned]`, or `params[unrolled.format(i)]`."""
  if scanned in params:
    return [_map(lambda x, i=i: x[i], params[scanned]) for i in range(count)]
  return [params[unrolled.format(i)] for i in range(count)]


def stack(per_layer: list[dict], scanned: str, unrolled: str, scan: bool) -> dict:
  """The inverse of `unstack`, in the layout the model config asks for."""
  if scan:
    return {scanned: _map(lambda *xs: np.stack(xs), *per_layer)}
  return {unrolled.format(i): p for i, p in enumerate(per_layer)}


def _map(fn, tree, *rest):
  if isinstance(tree, dict):
    return {k: _map(fn, v, *(r[k] for r in rest)) for k, v in tree.items()}
  return fn(tree, *rest)
