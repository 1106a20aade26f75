"""seqio's packing (seqio.utils.trim_and_pack_dataset) done in numpy: the same rows, without its per-example
tf.while_loop, which took about half the time of preparing a window of the indexed pipeline.

seqio packs each batch of max(lengths) examples on its own: in order, an
example joins the current row if every feature still fits, else the row is
closed and the example starts the next. An example's feature is its prefix of
as many tokens as it has non-zero ones. Each feature k gives k, k_positions
(0, 1, ... within each example) and k_segment_ids (1, 2, ... per example in
the row; 0 on padding).
"""

import numpy as np
from pretrain.system import tf_loader

tf = tf_loader.Lazy("tensorflow")


def pack_batch(lengths: list[int], *features: np.ndarray) -> list[np.ndarray]:
  """Packs a padded batch ([examples, width] per feature, in the order of `lengths`) into rows: for each feature,
  its tokens, positions and segment ids, each [rows, length], int32."""
  sizes = [np.count_nonzero(f, axis=1) for f in features]
  rows, row, fill = [], [], [0] * len(features)
  for i in range(features[0].shape[0]):
    if any(fill[k] + sizes[k][i] > lengths[k] for k in range(len(features))):
      rows.append(row)
      row, fill = [], [0] * len(features)
    row.append(i)
    fill = [fill[k] + sizes[k][i] for k in range(len(features))]
  rows.append(row)
  out = []
  for k, feature in enumerate(features):
    tokens = np.zeros((len(rows), lengths[k]), np.int32)
    positions = np.zeros_like(tokens)
    for r, members in enumerate(rows):
      at = 0
      for i in members:
        n = min(sizes[k][i], lengths[k])
        tokens[r, at:at + n] = feature[i, :n]
        positions[r, at:at + n] = np.arange(n)
        at += n
    segment_ids = np.cumsum(positions == 0, axis=1, dtype=np.int32) * (tokens != 0)
    out += [tokens, positions, segment_ids]
  return out


def trim_and_pack(dataset: tf.data.Dataset, feature_lengths: dict[str, int]) -> tf.data.Dataset:
  """seqio.utils.trim_and_pack_dataset for one-dimensional integer features, with pack_batch."""
  keys = list(feature_lengths)
  lengths = [feature_lengths[k] for k in keys]
  dataset = dataset.map(lambda ex: {k: ex[k][:feature_lengths[k]] for k in keys})
  dataset = dataset.padded_batch(max(lengths), padded_shapes={k: [-1] for k in keys})

  def pack(batch):
    packed = tf.numpy_function(lambda *f: pack_batch(lengths, *f), [tf.cast(batch[k], tf.int32) for k in keys],
                               [tf.int32] * (3 * len(keys)), stateful=False)
    out = {}
    for k, length, (tokens, positions, segment_ids) in zip(keys, lengths, zip(*[iter(packed)] * 3)):
      for name, value in ((k, tokens), (f"{k}_positions", positions), (f"{k}_segment_ids", segment_ids)):
        out[name] = tf.ensure_shape(value, [None, length])
    return out

  return dataset.map(pack).unbatch()


def numpy_packing(converter):
  """`converter` (a seqio FeatureConverter) packing with trim_and_pack; one that pads is returned as it is."""
  if converter.pack:
    converter._pack_or_pad = trim_and_pack  # pylint: disable=protected-access  (seqio's one packing call)
  return converter
