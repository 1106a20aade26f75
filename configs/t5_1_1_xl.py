"""T5 v1.1 XL (2.85B parameters): span corruption on C4, T5's recipe.

Sized for v4-64 or 16 x A100 80GB (FSDP): batch 128 x (512 inputs, 114 targets), Adafactor with
T5's inverse-square-root schedule, 524,288 (2^19) steps as T5.
"""

from pretrain.configs import _zoo


def get_config():
  return _zoo.t5_1_1(2048, 5120, 32, 24, "full", (-1, 8, 1))
