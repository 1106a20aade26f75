"""The `pretrain` command: one entry point, a subcommand per workflow.

  pretrain SUBCOMMAND --help       (or python -m pretrain SUBCOMMAND ...)

Each subcommand lives in its own module with a `main(argv, prog)`; it is
imported only when chosen, so `pretrain --help` does not start JAX.
"""

import difflib
import importlib
import os
import sys

# name: (module, one line for the overview)
SUBCOMMANDS = {
    "train": ("pretrain.commands.train", "pre-train a model from a config (resumes from the workdir's checkpoint)"),
    "eval": ("pretrain.commands.eval", "loss, accuracy and perplexity of a run's checkpoint on a task"),
    "generate": ("pretrain.commands.generate", "continue a prompt with a run's checkpoint"),
    "export": ("pretrain.commands.export", "write a run as a Hugging Face model directory"),
    "inspect-task": ("pretrain.commands.inspect_task", "print a task's examples as text or token ids"),
    "train-tokenizer": ("pretrain.commands.train_tokenizer", "train a SentencePiece model on a config's data"),
    "estimate-memory": ("pretrain.commands.estimate_memory", "per-device memory of a config, nothing allocated"),
    "bench": ("pretrain.commands.bench", "time training steps (optionally beside transformers)"),
    "launch": ("pretrain.commands.launch", "commands for TPU VM slices (tpu-vm) and SLURM clusters (slurm)"),
}


def usage() -> str:
  width = max(map(len, SUBCOMMANDS))
  lines = [f"  {name:<{width}}  {summary}" for name, (_, summary) in SUBCOMMANDS.items()]
  return ("usage: pretrain SUBCOMMAND [flags]   (pretrain SUBCOMMAND --help explains its flags)\n\nsubcommands:\n"
          + "\n".join(lines))


def _import_tensorflow_quietly() -> None:
  """Imports TensorFlow, and hides the GPUs from it, with the process's stderr closed: its native start-up
  lines (CPU feature and CUDA-driver notices, which TF_CPP_MIN_LOG_LEVEL does not reach) would precede every
  message. Setting TF_CPP_MIN_LOG_LEVEL yourself, or --verbose, keeps them. A machine without TensorFlow
  skips this."""
  sys.stderr.flush()
  saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
  os.dup2(devnull, 2)
  try:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf.config.set_visible_devices([], "GPU")  # It only reads data; the accelerators are JAX's.
  except ImportError:
    pass
  finally:
    os.dup2(saved, 2)
    os.close(saved)
    os.close(devnull)


def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  if not argv or argv[0] in ("-h", "--help", "help"):
    print(usage())
    return 0 if argv else 2
  name, rest = argv[0], argv[1:]
  if name not in SUBCOMMANDS:
    close = difflib.get_close_matches(name, SUBCOMMANDS, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    print(f"error: unknown subcommand {name!r}; {hint}the subcommands are {', '.join(SUBCOMMANDS)}", file=sys.stderr)
    return 2
  if "TF_CPP_MIN_LOG_LEVEL" not in os.environ and "--verbose" not in rest:
    _import_tensorflow_quietly()
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow only reads data here; keep its C++ logs to errors.
  module = importlib.import_module(SUBCOMMANDS[name][0])
  return module.main(rest, prog=f"pretrain {name}") or 0
