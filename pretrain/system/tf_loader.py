"""TensorFlow, imported once, on first use, and quietly on the user-facing commands.

TensorFlow only reads and transforms data here, writes TensorBoard summaries
and, where it is installed, serves workdir files (pretrain/system/files.py), so it is
loaded when the data path or a file is first touched, not at start-up: a command that fails on its flags or its config
answers without the seconds of TensorFlow's import. Its native start-up lines
(CPU feature and CUDA-driver notices, which TF_CPP_MIN_LOG_LEVEL does not
reach) would precede every message; `pretrain` (cli.py) sets `quiet`, and the
import then runs with the process's stderr closed.
"""

import contextlib
import importlib
import os
import sys

quiet = False  # Set by the command line unless --verbose asks for the libraries' logs.


def tensorflow():
  """The tensorflow module, with the GPUs hidden from it (the accelerators are JAX's) and tf.data tracing the
  package's functions as written (trace_as_written)."""
  if "tensorflow" in sys.modules and _ready:
    return sys.modules["tensorflow"]
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  with native_logs_hidden():
    import tensorflow as tf  # pylint: disable=g-import-not-at-top  (TensorFlow: loaded on first use)
    tf.config.set_visible_devices([], "GPU")
  trace_as_written()
  _ready.append(True)
  return tf


_ready = []  # Whether tensorflow() has set TensorFlow up (another import may have loaded it first).


def seqio():
  """The seqio module, TensorFlow (which it imports) loaded first by tensorflow(): every import of the data stack
  goes through here or Lazy, so that its native start-up lines stay hidden."""
  tensorflow()
  return importlib.import_module("seqio")


# seqio's modules whose functions the pipelines map and that hold no Python control flow on tensors: converting
# them took about 4 s of each process's first pipeline (a tiny run's evaluation batches: 5.0 s to build, 0.9 s
# without). seqio.utils stays converted: its map_over_dataset wraps a user's functions (which AutoGraph then
# converts as its callees) and its tf.while_loop packing needs conversion (data/packing.py replaces that packing).
SEQIO_AS_WRITTEN = ("seqio.dataset_providers", "seqio.feature_converters", "seqio.preprocessors",
                    "seqio.vocabularies")


def trace_as_written(modules: tuple[str, ...] = ("pretrain", *SEQIO_AS_WRITTEN)) -> None:
  """tf.data traces `modules`' functions as written, as it does TensorFlow's own. AutoGraph would rewrite every
  function a pipeline maps, and its callees, from their source (seconds of each process's start) to turn Python
  control flow on tensors into graph ops; these modules have none (a function that had would fail while
  tracing, not run differently). Other code, a user's preprocessors among it, is converted as before."""
  # pylint: disable-next=g-import-not-at-top  (TensorFlow: loaded on first use)
  from tensorflow.python.autograph.core import config
  for module in modules:
    if not any(rule.matches(module) for rule in config.CONVERSION_RULES):
      config.CONVERSION_RULES = (config.DoNotConvert(module), *config.CONVERSION_RULES)


@contextlib.contextmanager
def native_logs_hidden():
  """Where `quiet`, the process's stderr closed for the duration: native libraries' log lines, which no Python
  setting reaches, are dropped."""
  if not quiet:
    yield
    return
  sys.stderr.flush()
  saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
  os.dup2(devnull, 2)
  os.close(devnull)
  try:
    yield
  finally:
    os.dup2(saved, 2)
    os.close(saved)


class Lazy:
  """A module of the data stack (TensorFlow, seqio, pretrain.data), imported on first use, TensorFlow first.

  The objectives (pretrain/objectives/) declare their TensorFlow code at module level beside what the model side
  reads of them (their family, settings and checks), and the model side imports them where TensorFlow is not
  installed (an accelerator image, tests/bench/test_bench.py)."""

  def __init__(self, name: str):
    self._name = name

  def __getattr__(self, attribute: str):
    tensorflow()
    return getattr(importlib.import_module(self._name), attribute)
