"""Benchmarks the input pipeline of each objective: packed tokens per second.

  python tools/bench_data.py [--objectives=clm,span_corruption,ul2] [--seconds=10] [--rounds=3] [--batch_size=64]

For each objective, three pipelines over the bundled corpus's train split:
the seqio stream from raw text (SentencePiece tokenization included), the
same from pre-tokenized documents held in memory, and the indexed pipeline
that training reads by default (data.pipeline=indexed: a token store on
disk, windows of documents, this host's batches). Both run the objective, the feature converter
(packing; padding for MLM) and batching, as training does. Tokens are the non-padding positions
of the token features a model reads (inputs and targets for encoder-decoder
examples). The three run in turn (A B C A B C ...), each for --seconds in each of
--rounds rounds, so drift of the shared machine hits all three; the medians are printed.
Figures are recorded in tools/bench_data.md.
"""

import os
import statistics
import time

from pretrain import cli
from pretrain.config import POSITIVE
from pretrain.system import tf_loader
from pretrain.system.errors import exit_on_user_error


def pretokenized_task(name: str, tokens, vocabulary, objective) -> str:
  """A task whose source yields already tokenized documents, so only the objective runs."""
  tf, seqio = tf_loader.tensorflow(), tf_loader.seqio()

  def dataset_fn(split, shuffle_files, seed=None):
    del split, shuffle_files, seed
    return tf.data.Dataset.from_tensor_slices(tf.ragged.constant(tokens, dtype=tf.int32)).map(
        lambda t: {"targets": t})

  features = seqio.get_mixture_or_task(name).output_features
  seqio.TaskRegistry.remove(name + "_pretokenized")
  seqio.TaskRegistry.add(name + "_pretokenized", source=seqio.FunctionDataSource(dataset_fn, splits=["train"]),
                         preprocessors=[objective.preprocess], output_features=features)
  return name + "_pretokenized"


def measure(batches, seconds: float) -> float:
  """Non-padding tokens per second of an iterator of batches, after its first batch."""
  keys = ("decoder_target_tokens", "encoder_input_tokens")
  next(batches)
  tokens, start = 0, time.perf_counter()
  while time.perf_counter() - start < seconds:
    batch = next(batches)
    tokens += sum(int((batch[key] != 0).sum()) for key in keys if key in batch)
  return tokens / (time.perf_counter() - start)


def seqio_batches(task: str, lengths, family, batch_size: int):
  from pretrain.data import replay  # pylint: disable=g-import-not-at-top  (bench runs without TF)
  return replay.batches(task, "train", lengths, batch_size, family, shuffle=True, seed=0, repeat=True)


@exit_on_user_error
def main(argv: list[str], prog: str = "tools/bench_data.py") -> None:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--objectives", default="", help="comma-separated (default: every registered objective)")
  parser.add_argument("--seconds", type=cli.number(POSITIVE), default=10.0, help="measuring time per pipeline")
  parser.add_argument("--rounds", type=cli.at_least(1), default=3, help="turns of each pipeline; the median counts")
  parser.add_argument("--batch_size", type=cli.at_least(1), default=64)
  args, cfg = cli.parse_command_line(parser, argv)
  cfg.data.seq_len, cfg.data.inputs_length, cfg.data.targets_length = 512, 512, 512
  cfg.tokenizer.extra_ids = 200  # UL2's X-denoiser (mean 3, density 0.5) makes 127 spans at inputs 512.
  from pretrain import objectives, run as run_lib  # pylint: disable=g-import-not-at-top  (bench runs without TF)
  from pretrain.data import sources, tasks  # pylint: disable=g-import-not-at-top  (bench runs without TF)
  from pretrain.vocab import pipeline as vocab  # pylint: disable=g-import-not-at-top  (bench runs without TF)

  names = args.objectives.split(",") if args.objectives else objectives.NAMES
  for name in names:
    objectives.get(name)  # An unknown name fails now, not after the first measurements.
  source = sources.make_source(cfg.data)
  vocabulary = vocab.get_vocabulary(cfg, source, objectives.pieces(cfg))
  tokens = [vocabulary.encode(text) for text in source.texts("train")]
  print(f"{os.cpu_count()} CPU cores; bundled corpus, {sum(map(len, tokens)):,} tokens; batch {args.batch_size}; "
        f"lengths {cfg.data.seq_len} (clm, fim, mlm) and {cfg.data.inputs_length}/{cfg.data.targets_length}")
  print(f"{'objective':<18}{'raw text tok/s':>16}{'pre-tokenized tok/s':>21}{'indexed tok/s':>15}"
        f"{'indexed/raw':>13}{'indexed/pre':>13}")
  for name in names:
    objective = objectives.make(name, cfg.data, cfg.train.seed)
    task = tasks.register(source, vocabulary, objective)
    lengths = objective.family.task_lengths(cfg.data)
    pretokenized = pretokenized_task(task, tokens, vocabulary, objective)
    run_cfg = cfg.copy_and_resolve_references()
    run_cfg.data.objective, run_cfg.train.batch_size = name, args.batch_size
    run = run_lib.Run.build_with_data(run_cfg)
    # Each turn builds its pipeline anew: a live one would keep preparing batches while another is measured.
    pipelines = [lambda: seqio_batches(task, lengths, objective.family, args.batch_size),
                 lambda: seqio_batches(pretokenized, lengths, objective.family, args.batch_size),
                 run.train_batches]
    figures = [[] for _ in pipelines]
    for _ in range(args.rounds):
      for make, measured in zip(pipelines, figures):
        measured.append(measure(make(), args.seconds))
    raw, fast, indexed = (statistics.median(m) for m in figures)
    print(f"{name:<18}{raw:>16,.0f}{fast:>21,.0f}{indexed:>15,.0f}{indexed / raw:>13.2f}{indexed / fast:>13.2f}")
