"""T5 v1.1 large (783M parameters): span corruption on C4, T5's recipe.

Sized for 8 x A100 40GB (or a v4-16), FSDP 8: batch 128 x (512 inputs, 114 targets), full rematerialisation:
about 3.2 GiB per device (pretrain estimate-memory --devices=8 --config=configs/t5_1_1_large.py
--config.model.dtype=bfloat16), Adafactor with T5's inverse-square-root schedule, 524,288 (2^19) steps as T5.

On TPUs: compiled for a v4-16 by libtpu, 3.2 GiB per chip of 32 (pretrain compile
--topology=v4-16 --config=t5_1_1_large; every zoo config: tools/zoo_compile.md).
"""

from pretrain.configs import _zoo

SIZED_FOR = _zoo.SizedFor("8 x A100 40GB", devices=8, device_gib=40, estimate_gib=3.2, tpu="v4-16", tpu_gib=3.2)


def get_config():
  return _zoo.t5_1_1(1024, 2816, 16, 24, "full", (-1, 8, 1))
