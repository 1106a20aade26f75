"""The data path: sources -> vocabulary -> objectives -> seqio tasks -> batches.

Importing the package imports nothing heavy: the modules that use TensorFlow, seqio or TFDS reach them through
pretrain.system.tf_loader.Lazy, which imports TensorFlow on first use (quietly on the command line, the GPUs
hidden from it, tf.data tracing the package's own functions without AutoGraph). So the TensorFlow-free parts
of the data path (the curricula's schedule, the filters, deduplication) live here too.
"""
