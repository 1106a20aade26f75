"""The `pretrain` command: one entry point, a subcommand per workflow, and the run-config flags every command
takes.

  pretrain SUBCOMMAND --help       (or python -m pretrain SUBCOMMAND ...)

Each subcommand lives in its own module with a `main(argv, prog)`; it is
imported only when chosen, so `pretrain --help` does not start JAX.
"""

import argparse
import contextlib
import difflib
import importlib
import logging
import os
import signal
import sys
import traceback

from pretrain import config as config_lib
from pretrain.config import flags
from pretrain.config import gin as gin_config
from pretrain.parallel import gpu, tpu
from pretrain.system import host_memory, tf_loader
from pretrain.system.errors import UserError

# name: (module, one line for the overview)
SUBCOMMANDS = {
    "train": ("pretrain.commands.train", "pre-train a model from a config (resumes from the workdir's checkpoint)"),
    "cooldown": ("pretrain.commands.cooldown", "branch a wsd run's checkpoint into a run that decays the learning "
                 "rate to the end"),
    "eval": ("pretrain.commands.eval", "loss, accuracy and perplexity of a run's checkpoint on a task"),
    "lm-eval": ("pretrain.commands.lm_eval", "evaluate a run with lm-evaluation-harness (the project's tasks and "
                "lm-eval's)"),
    "probe": ("pretrain.commands.probe", "a linear probe of a run's representations: same-document passages"),
    "plot": ("pretrain.commands.plot", "draw a run's learning curves (curves.png) from its metrics.jsonl"),
    "goodput": ("pretrain.commands.goodput", "where a run's wall time went: productive steps and the rest"),
    "generate": ("pretrain.commands.generate", "continue a prompt with a run's checkpoint"),
    "export": ("pretrain.commands.export", "write a run as a Hugging Face model directory"),
    "inspect-task": ("pretrain.commands.inspect_task", "print a task's examples as text or token ids"),
    "inspect-data": ("pretrain.commands.inspect_data", "what data.filters and data.dedup remove, with examples"),
    "prepare-data": ("pretrain.commands.prepare_data", "tokenize a config's training data once into token stores"),
    "train-tokenizer": ("pretrain.commands.train_tokenizer", "train a SentencePiece model on a config's data"),
    "config": ("pretrain.commands.config", "print the config a command line resolves to, or every field's default "
               "and valid values"),
    "estimate-memory": ("pretrain.commands.estimate_memory", "per-device memory of a config, nothing allocated"),
    "compile": ("pretrain.commands.compile", "compile a config's train step for a TPU slice, here: fits, FLOPs, "
                "collectives, roofline"),
    "sweep": ("pretrain.experiments.sweep", "train a grid of config overrides, one run per point, and report them"),
    "experiment": ("pretrain.commands.experiment", "run one of the experiments (which objective, tokenizer, ...) "
                   "over seeds, with its table and verdicts"),
    "bench": ("pretrain.commands.bench", "time training steps (optionally beside transformers)"),
    "launch": ("pretrain.commands.launch", "commands for TPU VM slices (tpu-vm) and SLURM clusters (slurm)"),
}


class Parser(argparse.ArgumentParser):
  """argparse's parser, its mistakes (a missing, unknown or ill-typed flag) a UserError: one `error:` line, as
  every other bad input."""

  def error(self, message):
    raise UserError(f"{self.prog}: {message} (see --help)")


def parser_for(prog: str, doc: str, **kwargs) -> argparse.ArgumentParser:
  """A subcommand's flag parser, its module docstring as the help text, with the flag every command takes."""
  parser = Parser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)
  _add_verbose(parser)
  return parser


# Types of flags, checked as they are parsed, before any work: type=at_least(1), type=number(Valid(...)),
# type=output_file, ... (numbers: pretrain/config/flags.py, where the flags below the command line find them too).
at_least, number, seed = flags.at_least, flags.number, flags.seed


def _writable_parent(path: str) -> None:
  parent = os.path.dirname(os.path.abspath(path))
  while not os.path.exists(parent):  # Made when written.
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent):
    raise argparse.ArgumentTypeError(f"{path!r} cannot be written: {parent} is a file")


def output_file(path: str) -> str:
  """A file to write (a local path; its missing folders are made)."""
  if not path or os.path.isdir(path):
    raise argparse.ArgumentTypeError(f"{path!r} is not a file name")
  if "://" not in path:
    _writable_parent(path)
  return path


def run_workdir(path: str) -> str:
  """The workdir of a training run (checked here where local: before the seconds of imports that reading it
  needs)."""
  if "://" not in path and not os.path.isfile(os.path.join(path, "config.json")):
    raise argparse.ArgumentTypeError(f"{path!r} holds no run (no config.json); give the --workdir of a training run")
  return path


def output_dir(path: str) -> str:
  """A directory to write."""
  if not path:
    raise argparse.ArgumentTypeError("give a directory")
  if "://" not in path:
    if os.path.exists(path) and not os.path.isdir(path):
      raise argparse.ArgumentTypeError(f"{path!r} is a file, not a directory")
    _writable_parent(path)
  return path


def _add_verbose(parser: argparse.ArgumentParser) -> None:
  if "--verbose" not in parser._option_string_actions:  # pylint: disable=protected-access
    parser.add_argument("--verbose", action="store_true",
                        help="show the libraries' logs (TensorFlow, TFDS, Orbax) and the traceback of a config file "
                             "that raises")


def usage() -> str:
  width = max(map(len, SUBCOMMANDS))
  lines = [f"  {name:<{width}}  {summary}" for name, (_, summary) in SUBCOMMANDS.items()]
  return ("usage: pretrain SUBCOMMAND [flags]   (pretrain SUBCOMMAND --help explains its flags)\n\nsubcommands:\n"
          + "\n".join(lines))


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
  # TensorFlow is imported when data or a file is first touched (pretrain.system.tf_loader): quietly, unless asked.
  tf_loader.quiet = "--verbose" not in rest
  if tf_loader.quiet:
    # Not even the native libraries' warnings, unless the user set the level: TensorFlow's data threads log a
    # ~40-line "Type inference failed" on UL2's graphs that the run is not hurt by (a failure still ends the
    # command with its error). Read when the first of them loads, so set before JAX starts.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # The libraries' Python logs (TFDS's, Orbax's, lm-eval's task notes, TensorFlow's and AutoGraph's warnings).
    for library in ("absl", "lm_eval", "tensorflow"):
      logging.getLogger(library).setLevel(logging.ERROR)
    gpu.quiet_cuda_plugin()  # The CUDA plugin's, where it is installed to compile for GPUs.
  tpu.without_tpus(quiet=tf_loader.quiet)  # Where libtpu is installed to compile for TPUs (pretrain compile).
  host_memory.keep_freed_memory()  # Before JAX starts its threads.
  module = importlib.import_module(SUBCOMMANDS[name][0])
  return module.main(rest, prog=f"pretrain {name}") or 0


def entry() -> None:
  """The process's entry (the console script, python -m pretrain): main(), then, after a failure, an exit that
  no library's lingering thread can hold up (Orbax's kept a run that had printed its error alive)."""
  # Ctrl-C ends the process at once, even inside native code (a compilation), as SIGKILL would, which every
  # write here survives (files are written aside and renamed); the training loop saves first
  # (pretrain/train/signals.py). A KeyboardInterrupt could land in a library's callback, which prints it, goes
  # on, and has crashed on a second one. (A job started in the background, its Ctrl-C ignored, stays so.)
  if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
  try:
    code = main()
    sys.stdout.flush()  # Here, where a reader gone is caught (below), not in the exit's own flush.
  except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    if not isinstance(e.code, (int, type(None))):
      print(e.code, file=sys.stderr)
  except BrokenPipeError:  # The output's reader went away (`pretrain --help | head -1`): a shell's quiet exit.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Else the exit's flush fails a second time.
    code = 128 + signal.SIGPIPE
  except Exception:  # pylint: disable=broad-except  (a bug: its traceback, then the same exit)
    traceback.print_exc()
    code = 1
  if code:
    with contextlib.suppress(BrokenPipeError):  # A reader gone: what is left goes unread, as the exit code says.
      sys.stdout.flush()
      sys.stderr.flush()
    os._exit(code)
  sys.exit(code)


def parse_command_line(parser, argv: list[str]):
  """Parses a command's flags plus the run config: --config=NAME or FILE, then gin files (--gin_file),
  --gin.KEY=VALUE bindings and --config.KEY=VALUE overrides (with_overrides), in that order.

  Returns (args, config), the config checked (pretrain.objectives.validate); anything left over is an error.
  """
  from pretrain import configs  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
  parser.add_argument("--config", default=configs.DEFAULT,
                      help=f"a built-in config ({', '.join(configs.names())}), an ml_collections config file, or "
                           "a run's config.json (every value it trained with)")
  parser.add_argument("--gin_file", action="append", default=[],
                      help="gin file (or built-in gin twin, by name) of SECTION.FIELD = value bindings over --config "
                           "(repeatable)")
  parser.add_argument("--gin_search_paths", default="",
                      help="comma-separated folders where a gin include's relative path is also looked for, after "
                           "the including file's folder and the current directory (as T5X's flag)")
  _add_verbose(parser)
  parser.epilog = ("Any config field can be set with --config.SECTION.FIELD=VALUE, e.g. --config.train.steps=100, "
                   "or --gin.SECTION.FIELD=VALUE.")
  args, rest = parser.parse_known_args(argv)
  cfg = configs.load(args.config, args.verbose)
  gin_config.apply(cfg, [configs.path(path, kind="gin") for path in args.gin_file],
                   [a[len("--gin."):] for a in rest if a.startswith("--gin.")],
                   [*(path for path in args.gin_search_paths.split(",") if path), configs.GIN_DIRECTORY])
  overrides, rest = config_lib.parse_overrides([a for a in rest if not a.startswith("--gin.")])
  if rest:
    raise UserError(f"unknown arguments {rest}; see --help for the flags, and set config fields "
                    "with --config.KEY=VALUE (or --gin.KEY=VALUE)")
  cfg = with_overrides(cfg, overrides)
  from pretrain import objectives  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
  objectives.refuse_unknown_keys(cfg)  # The command line's keys were checked as they were set; the file's here.
  return args, cfg


def with_overrides(cfg, overrides: list[tuple[str, str]]):
  """`cfg` with the (KEY, VALUE text) of --config.KEY=VALUE flags set, those that name objectives
  (data.objective, data.eval_objectives) first, so that an objective of the user's brings its settings before
  they are set; tokenizer.kind that of the file tokenizer.path names; then checked (pretrain.objectives.validate)."""
  from pretrain import objectives, vocab  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
  naming = [(key, text) for key, text in overrides if key in objectives.NAMING_KEYS]
  for key, text in naming + [(key, text) for key, text in overrides if key not in objectives.NAMING_KEYS]:
    config_lib.override(cfg, key, text)
    if key in objectives.NAMING_KEYS:
      objectives.with_settings(cfg)
  objectives.with_settings(cfg)  # Also an objective named otherwise (a gin binding, the config itself).
  objectives.with_absolute_files(cfg)
  vocab.take_kind_from_file(cfg.tokenizer)
  objectives.validate(cfg)
  vocab.check_unread(cfg.tokenizer, {key for key, _ in overrides}, objectives.pieces(cfg))
  return cfg
