"""Documents cut into pieces of bounded size before they are tokenized (pretrain/vocab/long_texts.py says why):
the seqio preprocessor of the data path."""

import numpy as np

from pretrain.system import tf_loader
from pretrain.vocab.long_texts import MAX_DOCUMENT_BYTES, pieces

tf = tf_loader.Lazy("tensorflow")


def split_long_documents(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """A seqio preprocessor (before tokenize): each "targets" text longer than MAX_DOCUMENT_BYTES becomes
  several examples, its pieces in order; shorter ones pass unchanged (without leaving the graph)."""

  def split(text):
    return tf.cond(
        tf.strings.length(text) > MAX_DOCUMENT_BYTES,
        lambda: tf.reshape(tf.numpy_function(lambda t: np.array(pieces(t), dtype=object), [text], tf.string,
                                             stateful=False), [-1]),
        lambda: tf.reshape(text, [1]))

  return dataset.map(lambda example: {"targets": split(example["targets"])}).unbatch()
