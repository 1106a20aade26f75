"""T5 v1.1 XXL (11.3B parameters): span corruption on C4, T5's recipe.

Sized for 64 x H100 80GB (or a v4-256), FSDP 8 x tensor 8: batch 128 x (512 inputs, 114 targets), full
rematerialisation: about 7.0 GiB per device (pretrain estimate-memory --devices=64 --config=configs/t5_1_1_xxl.py
--config.model.dtype=bfloat16), Adafactor with T5's inverse-square-root schedule, 524,288 (2^19) steps as T5.

On TPUs: compiled for a v4-256 by libtpu, 3.8 GiB per chip of 32 (pretrain compile
--topology=v4-256 --config=t5_1_1_xxl; every zoo config: tools/zoo_compile.md).
"""

from pretrain.configs import _zoo

SIZED_FOR = _zoo.SizedFor("64 x H100 80GB", devices=64, device_gib=80, estimate_gib=7.0, tpu="v4-256", tpu_gib=3.8)


def get_config():
  return _zoo.t5_1_1(4096, 10240, 64, 24, "full", (-1, 8, 8))
