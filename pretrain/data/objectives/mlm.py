"""BERT's masked language modelling.

Of each segment's tokens, round(length * rate) are selected at random; of
those 80% become [MASK], 10% a random regular token and 10% stay as they are.
`weights` marks the selected positions: the loss is computed there only.
"""

import tensorflow as tf

from pretrain.data import vocab
from pretrain.data.objectives import common


def first_regular_id() -> int:
  """Ids below this are control and special tokens, never drawn as random replacements."""
  return 3 + len(vocab.SPECIAL_TOKENS)


def mask_tokens(tokens, seed, *, rate: float, mask_id: int, random_ids: tuple[int, int], candidates=None):
  """{'inputs', 'targets', 'weights'} for one segment.

  `candidates` (bool, the shape of `tokens`) limits the selection to those positions, round(their number * rate)
  of them; None makes every position a candidate.
  """
  n = tf.size(tokens)
  seeds = tf.random.experimental.stateless_split(seed, 3)
  if candidates is None:
    candidates = tf.ones([n], tf.bool)
  count = tf.cast(tf.round(tf.cast(tf.reduce_sum(tf.cast(candidates, tf.int32)), tf.float32) * rate), tf.int32)
  # Non-candidates sort after every candidate; adding 0 leaves the draws, so the order, of all-candidate segments
  # as they were before `candidates` existed.
  order = tf.argsort(tf.random.stateless_uniform([n], seeds[0]) + tf.where(candidates, 0.0, 2.0))
  selected = tf.scatter_nd(order[:count, None], tf.ones([count], tf.bool), [n])
  action = tf.random.stateless_uniform([n], seeds[1])
  random_tokens = tf.random.stateless_uniform([n], seeds[2], minval=random_ids[0], maxval=random_ids[1],
                                              dtype=tf.int32)
  inputs = tf.where(selected & (action < 0.8), mask_id, tokens)
  inputs = tf.where(selected & (action >= 0.8) & (action < 0.9), random_tokens, inputs)
  return {"inputs": inputs, "targets": tokens, "weights": tf.cast(selected, tf.int32)}


def mlm(dataset, sequence_length, output_features, *, seed: int, rate: float = 0.15):
  """seqio preprocessor: documents of 'targets' tokens -> masked segments of the inputs length."""
  vocabulary = output_features["targets"].vocabulary
  mask_id = vocab.single_piece_id(vocabulary, vocab.MASK_TOKEN)
  random_ids = (first_regular_id(), vocabulary.vocab_size - vocabulary.extra_ids)
  dataset = common.split_to_length(common.concatenate(dataset), sequence_length["inputs"])
  return dataset.map(lambda ex: mask_tokens(ex["targets"], common.example_seed(ex["targets"], seed), rate=rate,
                                            mask_id=mask_id, random_ids=random_ids),
                     num_parallel_calls=tf.data.AUTOTUNE)
