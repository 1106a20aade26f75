"""The experiments' figures: each page's one PNG, drawn with matplotlib, which is imported only to draw."""

import contextlib
import io

from pretrain.system import files


@contextlib.contextmanager
def drawn(path: str, cols: int = 1, size=(8, 4.8), rows: int = 1, dpi: int = 100, crop: bool = False, **subplots):
  """The axes of a figure of `rows` x `cols` plots (matplotlib's subplots), saved to `path` as the block ends: laid
  out to fit its size, or with `crop` cut to what was drawn."""
  import matplotlib  # pylint: disable=g-import-not-at-top  (matplotlib: only when drawing)
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top  (matplotlib: only when drawing)
  fig, axes = plt.subplots(rows, cols, figsize=size, **subplots)
  try:
    yield axes
    if not crop:
      fig.tight_layout()
    image = io.BytesIO()  # Written through files: a sweep's workdir may be an object store (gs://).
    fig.savefig(image, format="png", dpi=dpi, **({"bbox_inches": "tight"} if crop else {}))
    files.write_atomically(path, image.getvalue())
  finally:
    plt.close(fig)


def colormap(name: str = "viridis"):
  """matplotlib's colormap `name`: a color for each number from 0 to 1."""
  import matplotlib  # pylint: disable=g-import-not-at-top  (matplotlib: only when drawing)
  return matplotlib.colormaps[name]


def seeds(ax, results: dict[str, list[dict]], curve, label=None, style: str = "o-") -> dict[str, str]:
  """Each arm's runs as curves on `ax`: curve(run) gives its points; the first seed's with markers and the arm's
  label (label(arm, first run), else the arm), the other seeds' faint in its color. Returns {arm: its color}."""
  colors = {}
  for arm, runs in results.items():
    if not runs:
      continue
    line, = ax.plot(*zip(*curve(runs[0])), style, markersize=3, label=label(arm, runs[0]) if label else arm)
    for r in runs[1:]:
      ax.plot(*zip(*curve(r)), "-", color=line.get_color(), alpha=0.35)
    colors[arm] = line.get_color()
  return colors
