"""Prints examples of a registered task, decoded, before packing.

  pretrain inspect-task --task=corpus_span_corruption [--split=validation] [--num=3] \
      [--inputs_length=128 --targets_length=128] [--json]
  pretrain inspect-task --list
  pretrain inspect-task --step=800 --config.data.schedule=... [--num=3]

Tasks are registered for the source of the config (the bundled corpus unless
--config.data.source says otherwise), one per objective: {source}_{objective}
(the built-in ones and one of your own that --config.data.objective names);
--config.data.task names a seqio task of your own (see data.task_module).
--list prints each task with its model family and its objective's settings.
Sentinels (<extra_id_N>) and mode tokens ([NLU], [NLG], [S2S]) show in the text.
With --json: a first line {"vocab_size", "eos_id", "pad_id"}, then one object
per example mapping each feature to its token ids.
With --step (and a data.schedule): the members' shares of the rows at that
step, and --num rows of that step's batch, each of the member training draws
for it (the first stream's rows), shown as an example of that member's task.
Step S's batch is the one that training step trains, counting from 0, which
metrics.jsonl logs under step S + 1 (data/rate/MEMBER: a record's step counts
the steps done).
"""

import itertools
import json
import sys

from pretrain import cli
from pretrain.system import tf_loader
from pretrain.system.errors import UserError, exit_on_user_error


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain inspect-task") -> None:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--task", help="task name, e.g. corpus_ul2")
  parser.add_argument("--list", action="store_true", help="print the registered task names")
  parser.add_argument("--split", default="validation", choices=("train", "validation", "test", "downstream"),
                      help="which split (test: the Penn Treebank's; downstream: the bundled corpus's held-out one)")
  parser.add_argument("--num", type=cli.at_least(1), default=3, help="examples to print")
  parser.add_argument("--inputs_length", type=cli.at_least(1),
                      help="default: data.inputs_length (data.seq_len for mlm)")
  parser.add_argument("--targets_length", type=cli.at_least(1),
                      help="default: data.targets_length (data.seq_len for clm, fim)")
  parser.add_argument("--json", action="store_true", help="token ids as JSON lines")
  parser.add_argument("--step", type=cli.at_least(0),
                      help="data.schedule: the shares at this training step (from 0; metrics.jsonl logs it as step "
                           "S + 1) and examples of the members drawn for its rows")
  args, cfg = cli.parse_command_line(parser, argv)
  if not args.list and not args.task and args.step is None:
    raise UserError("give --task=NAME (see --list for the names), or --step=STEP for data.schedule's rows")

  seqio = tf_loader.seqio()
  from pretrain import config as config_lib, objectives  # pylint: disable=g-import-not-at-top  (not for --help)
  from pretrain.data import sources, tasks  # pylint: disable=g-import-not-at-top  (not for --help)
  from pretrain.vocab import pipeline as vocab  # pylint: disable=g-import-not-at-top  (not for --help)

  source = sources.make_source(cfg.data)
  if args.split not in source.splits:
    raise UserError(f"--split={args.split}: the source {source.name} has no such split; use one of "
                    f"{', '.join(source.splits)}")
  vocabulary = vocab.get_vocabulary(cfg, source, objectives.pieces(cfg))
  families, described = {}, {}  # task name -> its family, and how --list shows it
  for spec in objectives.known(cfg):
    name = tasks.register(source, vocabulary, spec(cfg.data, cfg.train.seed))
    families[name] = spec.family
    settings = " ".join(f"{key}={config_lib.get(cfg, key)!r}" for key in spec.settings)
    described[name] = f"{spec.family.name:<26}{settings}"
  if cfg.data.task:  # The user's own task, of data.objective's family.
    user_family = objectives.get(cfg.data.objective).family
    user_name, user_vocabulary = tasks.user_task(cfg.data, cfg.tokenizer, user_family)
    families[user_name], described[user_name] = user_family, f"{user_family.name:<26}(data.task)"
  if args.list:
    width = max(map(len, described)) + 2
    print("\n".join(f"{name:<{width}}{text}".rstrip() for name, text in described.items()))
    return
  if args.step is not None:
    return _scheduled_rows(args, cfg, source)
  if args.task not in families:
    raise UserError(f"unknown task {args.task!r}; the registered tasks are {', '.join(families)}")
  family = families[args.task]
  if args.task == cfg.data.task:
    vocabulary = user_vocabulary
  cfg.data.inputs_length = args.inputs_length if args.inputs_length is not None else cfg.data.inputs_length
  cfg.data.targets_length = args.targets_length if args.targets_length is not None else cfg.data.targets_length
  # A row of one length (clm and fim: targets, mlm: inputs) is data.seq_len long: its first feature's flag sets it.
  cfg.data.seq_len = (args.inputs_length if family.task_features[0] == "inputs" else args.targets_length) \
      or cfg.data.seq_len
  lengths = family.task_lengths(cfg.data)
  task = seqio.get_mixture_or_task(args.task)
  dataset = task.get_dataset(lengths, split=args.split, shuffle=False, seed=cfg.train.seed)
  # The task's features (a user's task may also keep, e.g., its text before tokenizing).
  examples = ({k: v for k, v in example.items() if k in task.output_features}
              for example in itertools.islice(dataset.as_numpy_iterator(), args.num))
  if args.json:
    print(json.dumps({"vocab_size": vocabulary.vocab_size, "eos_id": vocabulary.eos_id,
                      "pad_id": vocabulary.pad_id}))
    for example in examples:
      print(json.dumps({k: v.tolist() for k, v in example.items()}))
    return
  for i, example in enumerate(examples):
    print(f"=== {args.task} example {i} ({args.split})")
    _print_example(task, vocabulary, example)


def _print_example(task, vocabulary, example: dict) -> None:
  seqio = tf_loader.seqio()
  for feature, ids in example.items():
    values = isinstance(task.output_features[feature].vocabulary, seqio.PassThroughVocabulary)  # weights, labels
    shown = ids.tolist() if values else _text(vocabulary, ids.tolist())
    print(f"--- {feature} ({len(ids)} tokens)\n{shown}")


def _text(vocabulary, ids: list[int]) -> str:
  """The ids as text, an EOS that more tokens follow shown as </s>: decoding stops at the first (an NSP or SOP
  example's second segment follows one)."""
  segments, start = [], 0
  for i, token in enumerate(ids):
    if token == vocabulary.eos_id and i + 1 < len(ids):
      segments.append(vocabulary.decode(ids[start:i]))
      start = i + 1
  return "</s>".join([*segments, vocabulary.decode(ids[start:])])


def _scheduled_rows(args, cfg, source) -> None:
  """The schedule's shares at args.step and args.num of that step's rows: the member drawn for each, shown as an
  example of its objective over data.source (the validation split by default)."""
  seqio = tf_loader.seqio()
  from pretrain import objectives  # pylint: disable=g-import-not-at-top  (not for --help)
  from pretrain.data import indexed, tasks  # pylint: disable=g-import-not-at-top  (not for --help)
  plan = objectives.check_schedule(cfg)
  shares = ", ".join(f"{name} {share:.2f}" for name, share in zip(plan.names, plan.rates_at(args.step)) if share)
  print(f"data.schedule at step {args.step}: {shares}\n{plan.describe()}")
  per_stream = cfg.train.batch_size // cfg.data.streams
  drawn = indexed.member_choices(plan, cfg.train.seed, 0, args.step * per_stream, args.step, per_stream)
  streams = {}
  for row, member in enumerate(itertools.islice(drawn.as_numpy_iterator(), min(args.num, per_stream))):
    objective = objectives.make(plan.members[member].objective, cfg.data, cfg.train.seed)
    name = tasks.task_name(source, objective)
    if name not in streams:
      task = seqio.get_mixture_or_task(name)
      lengths = objective.family.task_lengths(cfg.data)
      streams[name] = (task, task.get_dataset(lengths, split=args.split, shuffle=False).as_numpy_iterator())
    task, examples = streams[name]
    print(f"=== step {args.step}, row {row}: {plan.names[member]} ({name}, {args.split})")
    example = next(examples)
    _print_example(task, task.output_features["targets"].vocabulary,
                   {k: v for k, v in example.items() if k in task.output_features})


if __name__ == "__main__":
  main(sys.argv[1:])
