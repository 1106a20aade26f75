"""Helpers for the config zoo: every zoo config is the quickstart with overrides."""

import os

from pretrain import config as config_lib

C4 = "c4/en:3.1.0"


def base():
  return config_lib.load_config_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), "quickstart.py"))


def apply(cfg, overrides: dict):
  """Sets dotted keys, e.g. {"model.d_model": 512}."""
  for key, value in overrides.items():
    section, name = key.split(".")
    cfg[section][name] = value
  return cfg


def c4(cfg, objective: str):
  """Pre-training on TFDS c4/en (prepared beforehand in data.tfds_data_dir) with a 32k T5-style vocabulary."""
  return apply(cfg, {"data.source": "tfds", "data.tfds_name": C4, "data.objective": objective,
                     "data.validation_split": "validation", "tokenizer.vocab_size": 32100,
                     "model.vocab_size": 32128, "model.dtype": "auto", "train.eval_every": 1000,
                     "train.log_every": 50, "train.checkpoint_every": 2000, "train.keep_checkpoints": 3})
