"""A run's vocabulary read without TensorFlow or seqio: the Python side (encode, decode, the ids' text) that the
commands which read no data, `generate` and `export`, need, so they start without those imports' seconds.

The data path wraps these as seqio vocabularies (pretrain/vocab/pipeline.py) with the same ids and text (tested).
Ids follow T5 and seqio in every kind: pad 0, eos 1, unk 2, no bos; `extra_ids` sentinels `<extra_id_N>`
appended at load time, `<extra_id_0>` the highest id; the objectives' special tokens are single pieces, ids 3
and up. Each vocabulary has `file` (the model it was loaded from), `workdir_name` (that file's name in a run's
workdir), `identity` (bytes that tell it from any other), `kind`, `extra_ids`, `vocab_size`, and `piece_bytes`:
the text each id stands for, which bits per byte, MLM's random tokens and the sentence boundaries read.
"""

import functools

import numpy as np
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2

from pretrain.system import files
from pretrain.vocab import tokenizers_json as tokenizers_vocab
from pretrain.system.errors import UserError

PAD_ID, EOS_ID, UNK_ID = 0, 1, 2
EXTRA_IDS = 100  # Sentinels by default, as T5; tokenizer.extra_ids sets another count.


def read(path: str) -> bytes:
  with files.open_file(path, "rb") as f:  # Also from gs://.
    return f.read()


def parse(data: bytes):
  """The SentencePiece processor or `tokenizers` tokenizer in `data`, with our control ids; None if neither."""
  tokenizer = tokenizers_vocab.parse(data) if data[:1] == b"{" else None
  if tokenizer is not None:
    return tokenizer
  try:
    processor = spm.SentencePieceProcessor(model_proto=data)
  except RuntimeError:
    return None
  ok = processor.get_piece_size() > 0 and (processor.pad_id(), processor.eos_id(), processor.unk_id()) == (
      PAD_ID, EOS_ID, UNK_ID)
  return processor if ok else None


def checked(path: str) -> tuple[bytes, object]:
  """The bytes of the vocabulary file `path` and what they parse to, or a UserError naming the problem."""
  if not files.exists(path) or files.isdir(path):
    raise UserError(f"vocabulary file {path!r} does not exist; give an existing .model or tokenizer .json file "
                    "in tokenizer.path, or leave it empty to train one")
  try:
    data = read(path)
  except files.errors() as e:
    raise UserError(f"cannot read the vocabulary {path!r} ({files.reason(e)})") from None
  parsed = parse(data)
  if parsed is None:
    raise UserError(f"{path!r} is neither a SentencePiece model nor a tokenizer.json of the kinds "
                    f"{', '.join(tokenizers_vocab.KINDS)}, with pad/eos/unk ids {(PAD_ID, EOS_ID, UNK_ID)}; train "
                    "one with `pretrain train-tokenizer`")
  return data, parsed


def load(path: str, extra_ids: int = EXTRA_IDS):
  """The vocabulary in a SentencePiece model or a tokenizer.json, with `extra_ids` sentinels."""
  data, parsed = checked(path)
  if isinstance(parsed, spm.SentencePieceProcessor):
    return SentencePieceText(path, data, extra_ids)
  return tokenizers_vocab.TokenizersText(path, data, extra_ids)


def with_sentinels(model: bytes, extra_ids: int) -> bytes:
  """The SentencePiece model with seqio's sentinels appended as it appends them: `▁<extra_id_N>`, user pieces
  (matched whole in the text), N counting down."""
  proto = sentencepiece_model_pb2.ModelProto.FromString(model)
  for i in reversed(range(extra_ids)):
    proto.pieces.add(piece=f"\u2581<extra_id_{i}>", score=0.0,
                     type=sentencepiece_model_pb2.ModelProto.SentencePiece.USER_DEFINED)
  return proto.SerializeToString()


def sentencepiece_piece_bytes(model: bytes, vocab_size: int) -> list[bytes | None]:
  """The bytes each id of a SentencePiece model stands for ('\u2581' is a space); None for control ids, the
  objectives' special pieces and the sentinels, which stand for no text."""
  piece = sentencepiece_model_pb2.ModelProto.SentencePiece
  table = [None] * vocab_size
  for i, p in enumerate(sentencepiece_model_pb2.ModelProto.FromString(model).pieces[:vocab_size]):
    if p.type == piece.BYTE:
      table[i] = bytes([int(p.piece[3:-1], 16)])
    elif p.type == piece.NORMAL:
      table[i] = p.piece.replace("\u2581", " ").encode("utf-8")
  return table


class SentencePieceText:
  """A SentencePiece vocabulary as seqio's SentencePieceVocabulary encodes and decodes in Python."""

  kind = "sentencepiece"
  workdir_name = "spm.model"
  pad_id, eos_id, unk_id = PAD_ID, EOS_ID, UNK_ID

  def __init__(self, path: str, data: bytes, extra_ids: int = EXTRA_IDS):
    self.file, self.extra_ids = path, extra_ids
    self.identity = with_sentinels(data, extra_ids)  # seqio's sp_model, which keys the token stores.
    self.tokenizer = spm.SentencePieceProcessor(model_proto=self.identity)
    self.vocab_size = self.tokenizer.get_piece_size()

  def encode(self, text: str) -> list[int]:
    return self.tokenizer.encode_as_ids(text)

  def decode(self, ids) -> str:
    """The text of `ids` up to the first EOS; ids past the vocabulary read as unknown."""
    ids = [UNK_ID if i >= self.vocab_size else int(i) for i in ids]
    return self.tokenizer.decode_ids(ids[:ids.index(EOS_ID) + 1] if EOS_ID in ids else ids)

  @functools.cached_property
  def piece_bytes(self) -> list[bytes | None]:
    return sentencepiece_piece_bytes(self.identity, self.vocab_size)


def single_piece_id(vocabulary, token: str) -> int:
  """The id of a special token, which must encode to exactly one piece (a space SentencePiece puts before it
  aside)."""
  ids = [i for i in vocabulary.encode(token) if vocabulary.piece_bytes[i] != b" "]
  if len(ids) != 1:
    raise UserError(f"the vocabulary encodes {token!r} as {len(ids)} pieces, not one; train a vocabulary "
                    "with `pretrain train-tokenizer`, which adds the special tokens as single pieces")
  return ids[0]


def sentinel_id(vocabulary, index: int) -> int:
  """The id of `<extra_id_{index}>`: sentinels count down from the top of the vocabulary."""
  return vocabulary.vocab_size - 1 - index


def first_regular_id(vocabulary) -> int:
  """Ids below this are control ids and special pieces (the objectives' tokens): the first id of text."""
  return next((i for i, text in enumerate(vocabulary.piece_bytes) if text is not None), vocabulary.vocab_size)


def bytes_per_id(vocabulary) -> np.ndarray:
  """The UTF-8 bytes of the text each id stands for: 0 for control ids, the objectives' special pieces and the
  sentinels. Bits per byte divide by their sum over the loss-bearing targets. The space SentencePiece puts
  before a document's first word counts: one byte per document that the text does not hold (about 0.1% of the
  bundled corpus's bytes); so does the space WordPiece's decoding puts before each word (see
  tokenizers_vocab.py)."""
  return np.asarray([len(text or b"") for text in vocabulary.piece_bytes], np.float32)
