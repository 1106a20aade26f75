"""The registry of vocabulary kinds (KINDS) and what reads, checks, loads and trains any of them: a model file
says its own kind (kind_of), and the config takes it (take_kind)."""


import os
import sys

from pretrain.system import files
from pretrain.system.errors import UserError
from pretrain.vocab import byte_bpe, byte_unigram, sentencepiece, utf8_bytes, wordpiece, words
from pretrain.vocab.ids import EOS_ID, EXTRA_IDS, PAD_ID, UNK_ID

# One line per kind.
KINDS = {kind.name: kind for kind in (sentencepiece.KIND, wordpiece.KIND, byte_bpe.KIND, utf8_bytes.KIND,
                                      byte_unigram.KIND, words.KIND)}
# Room every learned vocabulary needs beyond the sentinels: 3 control ids, the special tokens, 256 byte pieces and
# a few dozen more.
_MIN_LEARNED = 3 + 256 + 30


def read(path: str) -> bytes:
  with files.open_file(path, "rb") as f:  # Also from gs://.
    return f.read()


def kind_of(data: bytes):
  """The kind whose model file `data` is (with our control ids), or None."""
  return next((kind for kind in KINDS.values() if kind.parse(data)), None)


def checked(path: str):
  """(the bytes of the vocabulary file `path`, its kind), or a UserError naming the problem."""
  if not files.exists(path) or files.isdir(path):
    raise UserError(f"vocabulary file {path!r} does not exist; give an existing .model or tokenizer .json file "
                    "in tokenizer.path, or leave it empty to train one")
  try:
    data = read(path)
  except files.errors() as e:
    raise UserError(f"cannot read the vocabulary {path!r} ({files.reason(e)})") from None
  kind = kind_of(data)
  other = sentencepiece.other_ids(data) if kind is None else None
  if other:
    raise UserError(f"{path!r} is a SentencePiece model with pad/eos/unk ids {other}, not {(PAD_ID, EOS_ID, UNK_ID)} "
                    "as seqio reads them (id 0 padding, 1 EOS); train it again with pad_id=0 eos_id=1 unk_id=2 "
                    "bos_id=-1 (and byte_fallback=True to spell any text), or with `pretrain train-tokenizer`")
  if kind is None:
    raise UserError(f"{path!r} is neither a SentencePiece model nor a tokenizer.json of the kinds "
                    f"{', '.join(k for k in KINDS if k != 'sentencepiece')}, with pad/eos/unk ids "
                    f"{(PAD_ID, EOS_ID, UNK_ID)}; train one with `pretrain train-tokenizer`")
  return data, kind


_NOTED = set()


def take_kind(tokenizer_cfg, kind: str) -> None:
  """Sets tokenizer.kind to the `kind` of the file tokenizer.path names (a file says its own kind): the config, and
  so the workdir's config.json, records the vocabulary the run trains with; one line where it said another."""
  if tokenizer_cfg.kind != kind:
    noted = (tokenizer_cfg.path, tokenizer_cfg.kind)
    if noted not in _NOTED:  # Once a process: a sweep reads the same flags for each of its points.
      _NOTED.add(noted)
      print(f"note: tokenizer.path={tokenizer_cfg.path!r} holds a {kind} vocabulary: the run takes it as one, "
            f"tokenizer.kind={kind} (not {tokenizer_cfg.kind!r})", file=sys.stderr, flush=True)
    tokenizer_cfg.kind = kind


def take_kind_from_file(tokenizer_cfg) -> None:
  """take_kind() of the file tokenizer.path names, where it is a local vocabulary (a missing, remote or damaged
  one is read, and refused or taken, where the run loads it)."""
  path = tokenizer_cfg.path
  if path and files.local(path) and os.path.isfile(path):
    kind = kind_of(read(path))
    if kind is not None:
      take_kind(tokenizer_cfg, kind.name)


def load(path: str, extra_ids: int = EXTRA_IDS):
  """The vocabulary in a model file of any kind, with `extra_ids` sentinels."""
  data, kind = checked(path)
  return kind.text(path, data, extra_ids)


def from_bytes(path: str, data: bytes, extra_ids: int = EXTRA_IDS):
  """The vocabulary of a model file's bytes (read before from `path`)."""
  return kind_of(data).text(path, data, extra_ids)


def check_size(kind: str, vocab_size: int, extra_ids: int, special: tuple[str, ...]) -> None:
  """Refuses a `kind` vocabulary of `vocab_size` ids too small to learn any pieces (checked with the config)."""
  if KINDS[kind].learns and vocab_size < smallest_size(extra_ids, special):
    raise UserError(f"tokenizer.vocab_size={vocab_size} is too small: give at least "
                    f"{smallest_size(extra_ids, special)} ({extra_ids} sentinels, {len(special)} special tokens, "
                    "3 control ids, 256 byte pieces and a few dozen learned)")


def check_unread(tokenizer_cfg, set_keys, special: tuple[str, ...]) -> None:
  """Refuses a field of the tokenizer section that the command line sets (`set_keys`, e.g. tokenizer.vocab_size)
  and its kind does not read: a vocabulary size for a kind of fixed size, SentencePiece's model type for another."""
  kind = KINDS[tokenizer_cfg.kind]
  if "tokenizer.vocab_size" in set_keys and not kind.learns and not tokenizer_cfg.path:
    size = kind.size(tokenizer_cfg.vocab_size, tokenizer_cfg.extra_ids, special)
    raise UserError(f"tokenizer.vocab_size={tokenizer_cfg.vocab_size} is not read by tokenizer.kind="
                    f"{tokenizer_cfg.kind}, whose size is fixed ({size} ids with these sentinels and special "
                    "tokens); leave --config.tokenizer.vocab_size out")
  if "tokenizer.model_type" in set_keys and tokenizer_cfg.kind != "sentencepiece":
    raise UserError(f"tokenizer.model_type={tokenizer_cfg.model_type!r} is SentencePiece's, not read by "
                    f"tokenizer.kind={tokenizer_cfg.kind} (byte_bpe and byte_unigram name their model); leave "
                    "--config.tokenizer.model_type out")


def smallest_size(extra_ids: int, special: tuple[str, ...]) -> int:
  """The smallest tokenizer.vocab_size of a kind that learns pieces."""
  return extra_ids + len(special) + _MIN_LEARNED


def train(texts, kind: str, vocab_size: int, model_type: str, extra_ids: int, special: tuple[str, ...]) -> bytes:
  """The model file of a `kind` vocabulary of `vocab_size` ids (the `extra_ids` sentinels counted) trained on
  documents, `special` tokens single pieces."""
  check_size(kind, vocab_size, extra_ids, special)
  spec = KINDS[kind]
  try:
    return spec.train(texts, spec.size(vocab_size, extra_ids, special), special, model_type)
  except sentencepiece.TooFewPieces as e:
    largest, least = vocab_size - (e.pieces - e.most), smallest_size(extra_ids, special)
    raise UserError(e.problem, f"set tokenizer.vocab_size to at most {largest} (the text makes {e.most} pieces), "
                               "or give more text" if largest >= least else
                    f"give more text: it makes {e.most} pieces, too few for the smallest tokenizer.vocab_size, "
                    f"{least}") from None
