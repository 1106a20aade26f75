"""T5 v1.1 XL (2.85B parameters): span corruption on C4, T5's recipe.

Sized for 16 x A100 40GB (or a v4-32), FSDP 8: batch 128 x (512 inputs, 114 targets), full rematerialisation:
about 5.9 GiB per device (pretrain estimate-memory --devices=16 --config=configs/t5_1_1_xl.py
--config.model.dtype=bfloat16), Adafactor with T5's inverse-square-root schedule, 524,288 (2^19) steps as T5.

On TPUs: compiled for a v4-32 by libtpu, 6.5 GiB per chip of 32 (pretrain compile
--topology=v4-32 --config=t5_1_1_xl; every zoo config: tools/zoo_compile.md).
"""

from pretrain.configs import _zoo

SIZED_FOR = _zoo.SizedFor("16 x A100 40GB", devices=16, device_gib=40, estimate_gib=5.9, tpu="v4-32", tpu_gib=6.5)


def get_config():
  return _zoo.t5_1_1(2048, 5120, 32, 24, "full", (-1, 8, 1))
