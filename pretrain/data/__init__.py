"""The data path: sources -> vocabulary -> objectives -> seqio tasks -> batches.

Every module here imports TensorFlow; the package imports it first, through
pretrain.tf_loader (quietly on the command line, the GPUs hidden from it).
"""

from pretrain import tf_loader

tf_loader.tensorflow()
