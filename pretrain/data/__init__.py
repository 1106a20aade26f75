"""The data path: sources -> vocabulary -> objectives -> seqio tasks -> batches.

Every module here imports TensorFlow; the package imports it first, through
pretrain.tf_loader (quietly on the command line, the GPUs hidden from it), and
has tf.data trace the package's own functions without AutoGraph.
"""

from pretrain import tf_loader

tf_loader.tensorflow()
tf_loader.trace_as_written()
