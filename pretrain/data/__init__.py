"""The data path: sources -> vocabulary -> objectives -> seqio tasks -> batches."""

import tensorflow as tf

# TensorFlow only reads and transforms data here: the accelerators belong to JAX.
tf.config.set_visible_devices([], "GPU")
