"""T5 v1.1 large (783M parameters): span corruption on C4, T5's recipe.

Sized for v4-32 or 8 x A100 80GB: batch 128 x (512 inputs, 114 targets), Adafactor with
T5's inverse-square-root schedule, 524,288 (2^19) steps as T5.
"""

from pretrain.configs import _zoo


def get_config():
  return _zoo.t5_1_1(1024, 2816, 16, 24, "full", (-1, 8, 1))
