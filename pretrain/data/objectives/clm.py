"""Causal LM: every document ends with EOS and is cut into pieces of at most
the target length, so no token is dropped; the feature converter packs them."""

import tensorflow as tf

from pretrain.data.objectives import common


def clm(dataset, sequence_length, output_features):
  eos = output_features["targets"].vocabulary.eos_id
  dataset = dataset.map(lambda ex: {"targets": tf.concat([ex["targets"], [eos]], 0)})
  return common.split_to_length(dataset, sequence_length["targets"])
