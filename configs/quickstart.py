"""Quickstart: a small decoder-only causal LM on the bundled corpus, on a CPU.

Sized for a 2-core laptop: 5.5M parameters, 300 steps of 16 x 128 tokens,
finishing in a few minutes. Its values are the defaults of every field,
declared once with their valid values and help in pretrain/config/schema.py
(`pretrain config --fields` prints them, docs/config.md lists them). Every
field can be overridden on the command line, e.g. --config.train.steps=1000,
and a config file of one's own starts from these and changes some, as the
zoo's do (configs/_zoo.py).
"""

from pretrain.config import schema


def get_config():
  return schema.defaults()
