"""Helpers for the config zoo: every zoo config is the quickstart with overrides."""

import typing

from pretrain import config as config_lib, configs

C4 = "c4/en:3.1.0"


class SizedFor(typing.NamedTuple):
  """The hardware a zoo config is sized for (its module's SIZED_FOR), and what `pretrain estimate-memory` gives for
  it: `estimate_gib` per device, on `devices` CPU devices standing for them, with bfloat16 activations and the
  `flags` beside them. tests/config/test_config_zoo.py checks it against the device's memory and the run's lower bound;
  tools/zoo_memory.py measures it again."""
  hardware: str        # e.g. "8 x A100 40GB"
  devices: int
  device_gib: float    # memory of one device
  estimate_gib: float  # pretrain estimate-memory's total per device
  flags: tuple[str, ...] = ()
  tpu: str = ""        # the TPU slice it names (or of equal chips and memory class): `pretrain compile --topology`
  tpu_gib: float = 0.0  # what `pretrain compile` gives per chip there (libtpu's compilation of the step)


def base():
  return configs.load("quickstart")


def apply(cfg, overrides: dict):
  """Sets dotted keys, e.g. {"model.d_model": 512}; a mistyped key fails naming the nearest."""
  return config_lib.update(cfg, overrides, "config zoo")


def c4(cfg, objective: str):
  """Pre-training on TFDS c4/en (prepared beforehand in data.tfds_data_dir) with a 32k T5-style vocabulary."""
  return apply(cfg, {"data.source": "tfds", "data.tfds_name": C4, "data.objective": objective,
                     "data.validation_split": "validation", "tokenizer.vocab_size": 32100,
                     "model.vocab_size": 32128, "model.dtype": "auto", "train.eval_every": 1000,
                     "train.log_every": 50, "train.checkpoint_every": 2000, "train.keep_checkpoints": 3})


def t5_1_1(d_model: int, mlp_dim: int, num_heads: int, num_layers: int, remat: str, mesh: tuple[int, int, int],
           microbatches: int = 1):
  """T5 v1.1 at a given shape with T5's recipe: span corruption on C4, 512 -> 114 tokens, batch 128 (in
  `microbatches` pieces), Adafactor with the rsqrt schedule, 524,288 steps."""
  data, fsdp, tensor = mesh
  return apply(c4(base(), "span_corruption"), {
      "model.d_model": d_model, "model.mlp_dim": mlp_dim, "model.num_heads": num_heads,
      "model.num_kv_heads": num_heads, "model.head_dim": 64, "model.num_layers": num_layers,
      "model.num_decoder_layers": num_layers, "model.dropout": 0.0, "model.scan_layers": True, "model.remat": remat,
      "data.inputs_length": 512, "data.targets_length": 114,
      "optimizer.name": "adafactor", "optimizer.schedule": "rsqrt", "optimizer.learning_rate": 0.01,
      "optimizer.warmup_steps": 10_000, "optimizer.weight_decay": 0.0, "loss.z_loss": 1e-4,
      "train.steps": 524_288, "train.batch_size": 128, "train.microbatches": microbatches, "mesh.data": data, "mesh.fsdp": fsdp, "mesh.tensor": tensor,
  })
