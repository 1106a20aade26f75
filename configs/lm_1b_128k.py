"""lm_1b's model (Llama shape, about 1.1B parameters) on rows of 131,072 tokens of C4: a long-context run.

Sized for 8 x TPU v5p (FSDP 2 x context 4): batch 16 x 131072 tokens in 8 microbatches, each chip holding a
quarter of a row, splash attention on each chip's queries over the row's gathered keys and values: about
72.1 GiB per device (pretrain estimate-memory --devices=8 --config=configs/lm_1b_128k.py
--config.model.dtype=bfloat16 --config.model.attention=splash). Without the context axis (FSDP over 8, one whole
row a chip) the step does not fit: 123.3 GiB of temporaries (docs/guide/scale.md, "A long row with and without
the context axis"). GPUs are not its hardware: their kernel cannot offset its causal mask to a chip's share of
a row, and the XLA path keeps [L / 4, L] scores.

On TPUs: compiled for a v5p-16 by libtpu, 48.2 GiB per chip of 95 (pretrain compile
--topology=v5p-16 --config=lm_1b_128k; every zoo config: tools/zoo_compile.md).
"""

from pretrain.configs import _zoo, lm_1b

SIZED_FOR = _zoo.SizedFor("8 x TPU v5p", devices=8, device_gib=95, estimate_gib=72.1,
                          flags=("--config.model.attention=splash",), tpu="v5p-16", tpu_gib=48.2)


def get_config():
  return _zoo.apply(lm_1b.get_config(), {
      "data.seq_len": 131072, "train.batch_size": 16, "train.microbatches": 8,
      "mesh.data": -1, "mesh.fsdp": 2, "mesh.context": 4,
  })
