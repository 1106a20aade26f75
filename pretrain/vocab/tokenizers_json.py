"""Vocabularies made with the `tokenizers` library (the Rust tokenizers of transformers): WordPiece, byte-level
BPE, and raw UTF-8 bytes.

Each is a tokenizer.json with the ids every objective relies on (text_vocab.py): pad 0, eos 1, unk 2, then the
objectives' special tokens, single ids matched whole in the text as SentencePiece matches its user symbols, then
the learned pieces; seqio's sentinels are added at load time, `<extra_id_0>` the highest id.

- byte_bpe: GPT-2's byte-level BPE (its pre-tokenizer's word split, merges over bytes). Lossless, no unknown id.
- bytes: one id per UTF-8 byte, byte b at 3 + len(special) + b (ByT5 without merges; the special tokens come
  first, as in every kind). Lossless; its size is fixed, tokenizer.vocab_size does not apply.
- wordpiece: BERT's, cased: BERT's normaliser (control characters dropped, a space around each CJK character)
  and pre-tokenizer (words split at white space and punctuation). Not lossless: decoding puts one space between
  words, so runs of spaces, tabs and newlines come back as single spaces, and a word with a character the
  training text did not hold becomes the unknown id.
"""

import functools
import json
import re

import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

from pretrain.system.errors import UserError

KINDS = ("wordpiece", "byte_bpe", "bytes")
CONTROL = ("<pad>", "</s>", "<unk>")  # Ids 0, 1, 2 (text_vocab.PAD_ID, EOS_ID, UNK_ID).
WORD_PREFIX = "##"  # WordPiece's mark of a piece that continues a word.
SENTINEL = re.compile(r"<extra_id_\d+>")


@functools.cache
def byte_chars() -> tuple[str, ...]:
  """The printable character that byte-level BPE writes for each byte (GPT-2's table): the printable Latin-1
  bytes stand for themselves, the others are shifted past 255."""
  printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
  shifted = iter(range(256, 512))
  return tuple(chr(b) if b in printable else chr(next(shifted)) for b in range(256))


def _byte_level(tokenizer: tokenizers.Tokenizer, split_words: bool) -> tokenizers.Tokenizer:
  tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split_words)
  tokenizer.decoder = decoders.ByteLevel()
  return tokenizer


def train(texts, kind: str, pieces: int, special: tuple[str, ...]) -> bytes:
  """tokenizer.json of a `kind` tokenizer of `pieces` ids (the sentinels not counted) trained on documents."""
  tokens = [*CONTROL, *special]
  if kind == "bytes":
    vocabulary = {token: i for i, token in enumerate(tokens)}
    vocabulary.update({c: len(tokens) + b for b, c in enumerate(byte_chars())})
    tokenizer = _byte_level(tokenizers.Tokenizer(models.BPE(vocabulary, [])), split_words=False)
    tokenizer.add_special_tokens(tokens)  # Matched whole, as the trainers of the other kinds add them.
    return tokenizer.to_str().encode()
  if kind == "byte_bpe":
    tokenizer = _byte_level(tokenizers.Tokenizer(models.BPE()), split_words=True)
    trainer = trainers.BpeTrainer(vocab_size=pieces, special_tokens=tokens, initial_alphabet=list(byte_chars()),
                                  show_progress=False)
  elif kind == "wordpiece":
    tokenizer = tokenizers.Tokenizer(models.WordPiece(unk_token=CONTROL[2], continuing_subword_prefix=WORD_PREFIX))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix=WORD_PREFIX)
    trainer = trainers.WordPieceTrainer(vocab_size=pieces, special_tokens=tokens, show_progress=False,
                                        continuing_subword_prefix=WORD_PREFIX)
  else:
    raise ValueError(f"unknown tokenizer kind {kind!r}")
  tokenizer.train_from_iterator(texts, trainer)
  return tokenizer.to_str().encode()


def size(kind: str, vocab_size: int, extra_ids: int, special: tuple[str, ...]) -> int:
  """Ids a `kind` tokenizer trains, sentinels aside: the bytes kind's is fixed."""
  return len(CONTROL) + len(special) + 256 if kind == "bytes" else vocab_size - extra_ids


def parse(data: bytes) -> tokenizers.Tokenizer | None:
  """The tokenizer in `data`, if it is one of our kinds with our control ids; else None."""
  try:
    tokenizer = tokenizers.Tokenizer.from_str(data.decode("utf-8"))
  except Exception:  # pylint: disable=broad-except  (not UTF-8; tokenizers raises a bare Exception on bad JSON)
    return None
  ours = kind_of(tokenizer) and [tokenizer.id_to_token(i) for i in range(3)] == list(CONTROL)
  return tokenizer if ours else None


def kind_of(tokenizer: tokenizers.Tokenizer) -> str | None:
  """Which of KINDS the tokenizer is, by its model and pre-tokenizer; None for any other (e.g. the unigram
  tokenizer.json that a SentencePiece vocabulary exports, whose .model is the vocabulary)."""
  spec = json.loads(tokenizer.to_str())
  model, pre = spec["model"], (spec.get("pre_tokenizer") or {}).get("type")
  if model["type"] == "WordPiece" and pre == "BertPreTokenizer":
    return "wordpiece"
  if model["type"] == "BPE" and pre == "ByteLevel":
    return "byte_bpe" if model["merges"] else "bytes"
  return None


class TokenizersText:
  """A vocabulary over a tokenizer.json, encoding and decoding in Python as seqio's vocabularies do; the data
  path wraps it as a seqio vocabulary (pretrain/vocab/pipeline.py)."""

  workdir_name = "tokenizer.json"
  pad_id, eos_id, unk_id = 0, 1, 2

  def __init__(self, path: str, data: bytes, extra_ids: int = 0):
    self.file, self.identity, self.extra_ids = path, data, extra_ids
    self.tokenizer = parse(data)
    self.kind = kind_of(self.tokenizer)
    # seqio's sentinels, as SentencePiece's: `<extra_id_0>` the highest id, matched whole in the text. An export
    # (pretrain/vocab/hf_tokenizer.py) holds them already.
    held = sum(1 for token in self.tokenizer.get_vocab() if SENTINEL.fullmatch(token))
    if held not in (0, extra_ids):
      raise UserError(f"{path!r} holds {held} sentinels <extra_id_N>, not tokenizer.extra_ids={extra_ids}; set "
                      f"--config.tokenizer.extra_ids={held}")
    self.vocab_size = self.tokenizer.get_vocab_size() - held + extra_ids  # The sentinels are the tokenizer's ids.
    self.tokenizer.add_special_tokens([tokenizers.AddedToken(f"<extra_id_{i}>", normalized=False)
                                       for i in reversed(range(extra_ids))])

  def encode(self, text: str) -> list[int]:
    return self.tokenizer.encode(text, add_special_tokens=False).ids

  def decode(self, ids) -> str:
    """The text of `ids` up to the first EOS (seqio's decode); ids past the vocabulary read as unknown."""
    ids = [self.unk_id if i >= self.vocab_size else int(i) for i in ids]
    return self.decode_ids(ids[:ids.index(self.eos_id) + 1] if self.eos_id in ids else ids)

  def decode_ids(self, ids) -> str:  # Padding and EOS stand for no text, as in SentencePiece's decoding.
    return self.tokenizer.decode([int(i) for i in ids if i not in (0, 1)], skip_special_tokens=False)

  @functools.cached_property
  def piece_bytes(self) -> list[bytes | None]:
    """The bytes each id stands for; None for control ids, special tokens and sentinels. A WordPiece piece that
    starts a word stands for a space and the piece (decoding puts a space between words)."""
    special = {token.content for token in self.tokenizer.get_added_tokens_decoder().values()}
    byte_of = {c: b for b, c in enumerate(byte_chars())}
    table = []
    for i in range(self.vocab_size):
      token = self.tokenizer.id_to_token(i)
      if token is None or token in special:
        table.append(None)
      elif self.kind == "wordpiece":
        text = token[len(WORD_PREFIX):] if token.startswith(WORD_PREFIX) else " " + token
        table.append(text.encode("utf-8"))
      else:
        table.append(bytes(byte_of[c] for c in token))
    return table
