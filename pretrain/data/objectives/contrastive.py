"""Rows for the contrastive objective (unsupervised SimCSE): each document cut into pieces of at most the
sequence length, unmasked. The two views of a row are drawn by the model's dropout (pretrain/family.py), so
`inputs` and `targets` are the same tokens and no token carries a loss (`weights` 0)."""

import tensorflow as tf

from pretrain.data.objectives import common


def contrastive(dataset, sequence_length, output_features):
  del output_features
  dataset = common.split_to_length(dataset, sequence_length["inputs"])
  return dataset.map(lambda ex: {"inputs": ex["targets"], "targets": ex["targets"],
                                 "weights": tf.zeros_like(ex["targets"])}, num_parallel_calls=tf.data.AUTOTUNE)
