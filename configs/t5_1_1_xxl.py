"""T5 v1.1 XXL (11.3B parameters): span corruption on C4, T5's recipe.

Sized for v4-256 or 64 x H100 (FSDP x tensor 8): batch 128 x (512 inputs, 114 targets), Adafactor with
T5's inverse-square-root schedule, 524,288 (2^19) steps as T5.
"""

from pretrain.configs import _zoo


def get_config():
  return _zoo.t5_1_1(4096, 10240, 64, 24, "full", (-1, 8, 8))
