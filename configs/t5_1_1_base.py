"""T5 v1.1 base (248M parameters): span corruption on C4, T5's recipe.

Sized for v4-8 or 4 x A100 40GB: batch 128 x (512 inputs, 114 targets) in 2 microbatches (about
22 GiB per device on 4, by pretrain estimate-memory --config.model.dtype=bfloat16), Adafactor with
T5's inverse-square-root schedule, 524,288 (2^19) steps as T5.
"""

from pretrain.configs import _zoo


def get_config():
  return _zoo.t5_1_1(768, 2048, 12, 12, "none", (-1, 1, 1), microbatches=2)
