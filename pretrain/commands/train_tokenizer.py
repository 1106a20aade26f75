"""Trains a vocabulary on a run's data source.

  pretrain train-tokenizer --out=my.model [--config=quickstart] \
      [--config.data.source=files --config.data.train_files='docs/*.jsonl'] [--config.tokenizer.vocab_size=32000]

The model has pad=0, eos=1, unk=2, the special tokens (UL2 modes, FIM markers,
[MASK]) as single pieces, and room for seqio's sentinels on top (`tokenizer.extra_ids`, 100 by
default): `tokenizer.vocab_size` counts them. Use it with --config.tokenizer.path=my.model.
`--config.tokenizer.kind` picks SentencePiece (a .model; the default) or a kind of tokenizer .json
(`pretrain config --fields` lists them).
"""

import sys

from pretrain import cli
from pretrain.system import files
from pretrain.system.errors import exit_on_user_error


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain train-tokenizer") -> None:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--out", required=True, type=cli.output_file, help="path of the model file to write")
  args, cfg = cli.parse_command_line(parser, argv)
  from pretrain import objectives  # pylint: disable=g-import-not-at-top  (not for --help)
  from pretrain.data import sources  # pylint: disable=g-import-not-at-top  (imports TF)
  from pretrain import vocab  # pylint: disable=g-import-not-at-top  (not for --help)
  source = sources.make_source(cfg.data)
  texts = source.texts("train", max_chars=cfg.tokenizer.max_chars)
  t, special = cfg.tokenizer, objectives.pieces(cfg)
  files.write_atomically(args.out, vocab.train(texts, t.kind, t.vocab_size, t.model_type, t.extra_ids, special))
  vocabulary = vocab.load(args.out, t.extra_ids)
  print(f"Wrote {args.out}: {vocabulary.vocab_size} ids with the sentinels "
        f"(<extra_id_0> = {vocab.sentinel_id(vocabulary, 0)}), pad {vocab.PAD_ID}, eos {vocab.EOS_ID}, "
        f"unk {vocab.UNK_ID}; special tokens "
        + ", ".join(f"{piece}={vocab.single_piece_id(vocabulary, piece)}" for piece in special))


if __name__ == "__main__":
  main(sys.argv[1:])
