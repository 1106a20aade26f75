"""What the kinds made with the `tokenizers` library (the Rust tokenizers of transformers) share: a
tokenizer.json with the ids every objective relies on (ids.py): pad 0, eos 1, unk 2, then the objectives' special
tokens, single ids matched whole in the text as SentencePiece matches its user symbols, then the learned pieces;
seqio's sentinels are added at load time, `<extra_id_0>` the highest id.

Each kind is a TokenizersKind in a module of its own (wordpiece.py, byte_bpe.py, ...) that says how it
trains, how its tokenizer.json is told from the others', and what text each of its pieces stands for; reading
them (TokenizersText) and their Hugging Face tokenizer.json (their own) are here.
"""

import functools
import json
import re

import tokenizers
from tokenizers import decoders, pre_tokenizers

from pretrain.system.errors import UserError
from pretrain.vocab import ids

CONTROL = ("<pad>", "</s>", "<unk>")  # Ids 0, 1, 2 (ids.PAD_ID, EOS_ID, UNK_ID).
SENTINEL = re.compile(r"<extra_id_\d+>")
WORKDIR_NAME = "tokenizer.json"
SUFFIX = ".json"


@functools.cache
def byte_chars() -> tuple[str, ...]:
  """The printable character that byte-level BPE writes for each byte (GPT-2's table): the printable Latin-1
  bytes stand for themselves, the others are shifted past 255."""
  printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
  shifted = iter(range(256, 512))
  return tuple(chr(b) if b in printable else chr(next(shifted)) for b in range(256))


def byte_level(tokenizer: tokenizers.Tokenizer, split_words: bool) -> tokenizers.Tokenizer:
  """The tokenizer, reading and writing bytes as GPT-2's byte-level BPE does."""
  tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split_words)
  tokenizer.decoder = decoders.ByteLevel()
  return tokenizer


def byte_text(token: str) -> bytes:
  """The bytes a byte-level piece stands for."""
  byte_of = _byte_of()
  return bytes(byte_of[c] for c in token)


@functools.cache
def _byte_of() -> dict[str, int]:
  return {c: b for b, c in enumerate(byte_chars())}


def spec(data: bytes) -> dict | None:
  """The tokenizer.json in `data` as JSON, if `tokenizers` reads it and its first ids are our control ids."""
  try:
    tokenizer = tokenizers.Tokenizer.from_str(data.decode("utf-8"))
  except Exception:  # pylint: disable=broad-except  (not UTF-8; tokenizers raises a bare Exception on bad JSON)
    return None
  if [tokenizer.id_to_token(i) for i in range(3)] != list(CONTROL):
    return None
  return json.loads(tokenizer.to_str())


class TokenizersText:
  """A vocabulary over a tokenizer.json of a kind's module (`kind`), encoding and decoding in Python as seqio's
  vocabularies do; the data path wraps it as a seqio vocabulary (pretrain/vocab/pipeline.py)."""

  workdir_name = WORKDIR_NAME
  pad_id, eos_id, unk_id = ids.PAD_ID, ids.EOS_ID, ids.UNK_ID

  def __init__(self, path: str, data: bytes, extra_ids: int, kind: "TokenizersKind"):
    self.file, self.identity, self.extra_ids, self.kind_spec = path, data, extra_ids, kind
    self.kind = kind.name
    self.tokenizer = tokenizers.Tokenizer.from_str(data.decode("utf-8"))
    # seqio's sentinels, as SentencePiece's: `<extra_id_0>` the highest id, matched whole in the text. An export
    # (pretrain/vocab/hf_export.py) holds them already.
    held = sum(1 for token in self.tokenizer.get_vocab() if SENTINEL.fullmatch(token))
    if held not in (0, extra_ids):
      raise UserError(f"{path!r} holds {held} sentinels <extra_id_N>, not tokenizer.extra_ids={extra_ids}; set "
                      f"--config.tokenizer.extra_ids={held}")
    self.vocab_size = self.tokenizer.get_vocab_size() - held + extra_ids  # The sentinels are the tokenizer's ids.
    self.tokenizer.add_special_tokens([tokenizers.AddedToken(f"<extra_id_{i}>", normalized=False)
                                       for i in reversed(range(extra_ids))])

  def encode(self, text: str) -> list[int]:
    return self.tokenizer.encode(text, add_special_tokens=False).ids

  def decode(self, token_ids) -> str:
    """The text of `token_ids` up to the first EOS (seqio's decode); ids past the vocabulary read as unknown."""
    token_ids = [self.unk_id if i >= self.vocab_size else int(i) for i in token_ids]
    return self.decode_ids(token_ids[:token_ids.index(self.eos_id) + 1] if self.eos_id in token_ids else token_ids)

  def decode_ids(self, token_ids) -> str:  # Padding and EOS stand for no text, as in SentencePiece's decoding.
    return self.tokenizer.decode([int(i) for i in token_ids if i not in (0, 1)], skip_special_tokens=False)

  @functools.cached_property
  def piece_bytes(self) -> list[bytes | None]:
    """The bytes each id stands for (its kind's piece_text); None for control ids, special tokens and
    sentinels."""
    special = {token.content for token in self.tokenizer.get_added_tokens_decoder().values()}
    table = []
    for i in range(self.vocab_size):
      token = self.tokenizer.id_to_token(i)
      table.append(None if token is None or token in special else self.kind_spec.piece_text(token))
    return table


class TokenizersKind:
  """A kind of tokenizer.json; a subclass says its name, how it trains, how its tokenizer.json is told apart and
  what text its pieces stand for."""
  name: str
  workdir_name, suffix, learns = WORKDIR_NAME, SUFFIX, True
  hf_tokenizer_config: dict = {}  # Its own tokenizer.json reads as transformers reads any by default.

  @property
  def cache_prefix(self) -> str:  # Its cached files' names.
    return self.name

  @property
  def what(self) -> str:  # What its model file is.
    return f"{self.name} tokenizer.json"

  def is_spec(self, spec: dict) -> bool:
    """Whether a tokenizer.json (as JSON) is of this kind."""
    raise NotImplementedError

  def train(self, texts, pieces: int, special: tuple[str, ...], model_type: str | None = None) -> bytes:
    """tokenizer.json of `pieces` ids (the sentinels not counted) trained on documents, `special` tokens single
    ids after the control ids."""
    raise NotImplementedError

  def piece_text(self, token: str) -> bytes:
    """The bytes a regular piece stands for."""
    raise NotImplementedError

  def size(self, vocab_size: int, extra_ids: int, special: tuple[str, ...]) -> int:
    """Ids it trains, sentinels aside."""
    return vocab_size - extra_ids

  def parse(self, data: bytes) -> bool:
    found = spec(data)
    return found is not None and self.is_spec(found)

  def text(self, path: str, data: bytes, extra_ids: int) -> TokenizersText:
    return TokenizersText(path, data, extra_ids, self)

  def cache_options(self, model_type: str, extra_ids: int, special) -> list:
    """What, besides the size and the text, makes a trained tokenizer differ (its cache key)."""
    del model_type
    return [self.name, extra_ids, list(special), f"tokenizers {tokenizers.__version__}"]

  def hf_tokenizer(self, vocabulary) -> tokenizers.Tokenizer:
    """The vocabulary's own tokenizer, sentinels included: a tokenizer.json already."""
    return tokenizers.Tokenizer.from_str(vocabulary.tokenizer.to_str())
