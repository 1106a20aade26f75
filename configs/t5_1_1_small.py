"""T5 v1.1 small (77M parameters): span corruption on C4, T5's recipe.

Sized for 1 x A100 40GB (or a v4-8, 4 chips): batch 128 x (512 inputs, 114 targets) in 2 microbatches
(about 30 GiB on one device, by pretrain estimate-memory --config.model.dtype=bfloat16), Adafactor with
T5's inverse-square-root schedule, 524,288 (2^19) steps as T5.

On TPUs: compiled for a v4-8 by libtpu, 6.8 GiB per chip of 32 (pretrain compile
--topology=v4-8 --config=t5_1_1_small; every zoo config: tools/zoo_compile.md).
"""

from pretrain.configs import _zoo

SIZED_FOR = _zoo.SizedFor("1 x A100 40GB", devices=1, device_gib=40, estimate_gib=30, tpu="v4-8", tpu_gib=6.8)


def get_config():
  return _zoo.t5_1_1(512, 1024, 6, 8, "none", (-1, 1, 1), microbatches=2)
