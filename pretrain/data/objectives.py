"""Pre-training objectives as seqio preprocessors: pure tf.data functions.

Each runs after tokenization. Causal LM (`clm`): every document ends with EOS
and is cut into pieces of at most the target length, so no token is dropped;
the feature converter then packs the pieces.
"""

import seqio
import tensorflow as tf


def split_to_length(dataset: tf.data.Dataset, sequence_length, feature: str = "targets") -> tf.data.Dataset:
  """Cuts each example's `feature` into consecutive pieces of at most its length."""
  length = sequence_length[feature]

  def split(example):
    tokens = example[feature]
    starts = tf.range(0, tf.size(tokens), length)
    pieces = tf.RaggedTensor.from_row_lengths(tokens, tf.minimum(length, tf.size(tokens) - starts))
    return tf.data.Dataset.from_tensor_slices({feature: pieces})

  return dataset.flat_map(split)


CLM_PREPROCESSORS = (seqio.preprocessors.tokenize, seqio.preprocessors.append_eos, split_to_length)
