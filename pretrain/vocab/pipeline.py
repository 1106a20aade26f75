"""Vocabularies of the data path: training, caching by content, and loading as seqio vocabularies.

`tokenizer.kind` picks one: SentencePiece (unigram or BPE, `tokenizer.model_type`; the default), or WordPiece,
byte-level BPE or raw bytes (pretrain/vocab/tokenizers_json.py). What each holds, its ids and the helpers that read
them (sentinel_id, single_piece_id, bytes_per_id, ...) are pretrain/vocab/__init__.py's, which reads a vocabulary
without TensorFlow; here they become seqio vocabularies, whose TensorFlow ops the pipelines map.
"""

import functools
import hashlib
import io
import json
import os
import sys

import numpy as np
import sentencepiece as spm

from pretrain.system import files, tf_loader
from pretrain import vocab as text_vocab
from pretrain.vocab import tokenizers_json as tokenizers_vocab
from pretrain.vocab import long_texts
from pretrain.system.cache import build_once, cache_dir
from pretrain.system.errors import UserError
# What the data path reads of any vocabulary, here beside the vocabularies it loads.
from pretrain.vocab import EOS_ID, EXTRA_IDS, PAD_ID, UNK_ID  # pylint: disable=unused-import
from pretrain.vocab import bytes_per_id, first_regular_id, sentinel_id, single_piece_id  # pylint: disable=unused-import

tf = tf_loader.Lazy("tensorflow")
seqio = tf_loader.Lazy("seqio")

# SentencePiece skips longer sentences (its max_sentence_length); documents are fed paragraph by paragraph,
# a longer paragraph in pieces.
_MAX_LINE_BYTES = 4192
KINDS = ("sentencepiece", *tokenizers_vocab.KINDS)


def trainer_options(pieces) -> dict:
  """Trainer options besides the size and type; part of the cache key. The tokenizer is lossless,
  decode(encode(text)) == text: no normalisation, white space kept, rare characters spelled as bytes. `pieces`:
  the special tokens, each made one piece."""
  return dict(pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1, user_defined_symbols=list(pieces),
              character_coverage=0.9995, split_digits=True, byte_fallback=True, normalization_rule_name="identity",
              remove_extra_whitespaces=False, allow_whitespace_only_pieces=True)


def _training_lines(texts):
  """Paragraphs, newlines kept, so that pieces for line breaks and indentation are learned."""
  for text in texts:
    for paragraph in text.split("\n\n"):
      for piece in long_texts.pieces(paragraph.encode("utf-8"), _MAX_LINE_BYTES):
        if piece.strip():
          yield piece.decode("utf-8")


def train_sentencepiece(texts, vocab_size: int, model_type: str, extra_ids: int, special: tuple[str, ...]) -> bytes:
  """Trains a model on an iterable of documents; `vocab_size` counts the `extra_ids` sentinels too, `special` are
  the tokens made single pieces."""
  pieces = vocab_size - extra_ids
  _check_size(vocab_size, extra_ids, special)
  model = io.BytesIO()
  fed = {"lines": 0, "chars": 0}

  def counted(lines):
    for line in lines:
      fed["lines"] += 1
      fed["chars"] += len(line)
      yield line

  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=counted(_training_lines(texts)), model_writer=model, vocab_size=pieces,
        model_type=model_type, num_threads=os.cpu_count() or 1, minloglevel=2,
        logstream=open(os.devnull, "w"), **trainer_options(special))
  except RuntimeError as e:
    raise UserError(f"SentencePiece could not train a {pieces}-piece model on {fed['chars']:,} characters in "
                    f"{fed['lines']:,} lines of text ({e}); lower tokenizer.vocab_size or give more text") from None
  return model.getvalue()


def _check_size(vocab_size: int, extra_ids: int, special: tuple[str, ...]) -> None:
  if vocab_size - extra_ids < 3 + len(special) + 256 + 30:
    raise UserError(f"tokenizer.vocab_size={vocab_size} is too small: it must exceed {extra_ids} sentinels, "
                    "3 control ids, the special tokens and 256 byte pieces by a few dozen pieces")


def train(texts, kind: str, vocab_size: int, model_type: str, extra_ids: int, special: tuple[str, ...]) -> bytes:
  """The model file of a `kind` vocabulary trained on documents (see train_sentencepiece)."""
  if kind == "sentencepiece":
    return train_sentencepiece(texts, vocab_size, model_type, extra_ids, special)
  if kind != "bytes":
    _check_size(vocab_size, extra_ids, special)
  return tokenizers_vocab.train(texts, kind, tokenizers_vocab.size(kind, vocab_size, extra_ids, special), special)


def cached_model(texts, vocab_size: int, model_type: str, cache: str, special: tuple[str, ...],
                 extra_ids: int = EXTRA_IDS, kind: str = "sentencepiece") -> str:
  """Path of a model trained on `texts`, trained once per distinct text and options."""
  if kind == "bytes":  # Nothing to learn: the same model for any text.
    texts, vocab_size = [], tokenizers_vocab.size(kind, vocab_size, extra_ids, special) + extra_ids
  texts = list(texts)
  if kind == "sentencepiece":
    # How the text becomes training lines is part of the key: long paragraphs were once left out, now cut.
    options = [model_type, extra_ids, trainer_options(special), {"max_line_bytes": _MAX_LINE_BYTES,
                                                                 "long_paragraphs": "cut"}]
    name = f"spm_{vocab_size}"
  else:
    options = [kind, extra_ids, list(special), f"tokenizers {tokenizers_vocab.tokenizers.__version__}"]
    name = f"{kind}_{vocab_size}"
  digest = hashlib.sha256(json.dumps([vocab_size, *options], sort_keys=True).encode())
  for text in texts:
    digest.update(hashlib.sha256(text.encode("utf-8")).digest())
  suffix = ".model" if kind == "sentencepiece" else ".json"
  path = os.path.join(cache, "tokenizers", f"{name}_{digest.hexdigest()[:16]}{suffix}")

  def build():
    if os.path.exists(path):  # There, but not a model: damaged (cut short, overwritten).
      aside = f"{path}.damaged-{os.getpid()}"
      os.replace(path, aside)
      what = "SentencePiece model" if kind == "sentencepiece" else f"{kind} tokenizer.json"
      print(f"warning: the cached vocabulary {path} is not a {what}; moved aside to {aside}, "
            "training it again", file=sys.stderr, flush=True)
    print(f"Training a {vocab_size}-token {kind} vocabulary (once) -> {path}", file=sys.stderr, flush=True)
    files.write_atomically(path, train(texts, kind, vocab_size, model_type, extra_ids, special))

  build_once(path, lambda: os.path.exists(path) and text_vocab.parse(text_vocab.read(path)) is not None,
                        build)
  return path


def load(path: str, extra_ids: int = EXTRA_IDS):
  """Loads a SentencePiece model or a tokenizer.json with seqio's sentinels, checking the ids we rely on."""
  data, parsed = text_vocab.checked(path)
  if isinstance(parsed, spm.SentencePieceProcessor):
    return SentencePieceVocabulary(path, extra_ids=extra_ids)
  return TokenizersVocabulary(tokenizers_vocab.TokenizersText(path, data, extra_ids))


class SentencePieceVocabulary(seqio.SentencePieceVocabulary):
  """seqio's, with its TensorFlow tokenizer made once, eagerly and quietly. seqio makes one in each traced
  function, and the kernel that loads the model logs SentencePiece's "precompiled_charsmap is empty" (the
  identity normalizer) from a data thread, past any Python setting; made here, its line is held back
  (tf_loader.native_logs_hidden) and the traced functions share the one tokenizer."""

  kind = "sentencepiece"
  workdir_name = "spm.model"

  @property
  def file(self) -> str:
    return self.sentencepiece_model_file

  @property
  def identity(self) -> bytes:
    return self.sp_model

  @functools.cached_property
  def tf_tokenizer(self):
    with tf.init_scope(), tf_loader.native_logs_hidden():
      tokenizer = super().tf_tokenizer
      tokenizer.tokenize("")  # Runs the kernel that loads the model, and logs.
    return tokenizer

  @functools.cached_property
  def piece_bytes(self) -> list[bytes | None]:
    return text_vocab.sentencepiece_piece_bytes(self.sp_model, self.vocab_size)

  def __getstate__(self):  # What seqio compares (__eq__) and pickles: the model, not what is made of it.
    state = super().__getstate__()
    state.pop("tf_tokenizer", None)
    state.pop("piece_bytes", None)
    return state


class TokenizersVocabulary(seqio.Vocabulary):
  """A `tokenizers` vocabulary (pretrain/vocab/tokenizers_json.py) as seqio reads one. The data pipeline tokenizes
  once, into the token store, so its TensorFlow ops call the Rust tokenizer through tf.numpy_function."""

  def __init__(self, text: tokenizers_vocab.TokenizersText):
    super().__init__(extra_ids=text.extra_ids)
    self.text = text
    self.file, self.identity, self.kind, self.tokenizer = text.file, text.identity, text.kind, text.tokenizer
    self.workdir_name = text.workdir_name

  @property
  def piece_bytes(self) -> list[bytes | None]:
    return self.text.piece_bytes

  @property
  def eos_id(self) -> int:
    return self.text.eos_id

  @property
  def unk_id(self) -> int:
    return self.text.unk_id

  @property
  def vocab_size(self) -> int:
    return self.text.vocab_size

  @property
  def _base_vocab_size(self) -> int:
    return self.text.vocab_size

  def _encode(self, s: str):
    return self.text.encode(s)

  def _decode(self, ids) -> str:
    return self.text.decode_ids(ids)

  def _encode_tf(self, s):
    def encode(text):  # A scalar string arrives as a 0-d array of bytes.
      return np.asarray(self._encode(np.asarray(text).item().decode("utf-8")), np.int32)
    ids = tf.numpy_function(encode, [s], tf.int32, stateful=False)
    ids.set_shape([None])
    return ids

  def _decode_tf(self, ids):
    def decode(rows):
      return np.asarray([self._decode(row) for row in rows.reshape(-1, rows.shape[-1])], object).reshape(
          rows.shape[:-1])
    text = tf.numpy_function(decode, [ids], tf.string, stateful=False)
    text.set_shape(ids.shape[:-1])
    return text

  def __getstate__(self):
    return {"file": self.file, "data": self.identity, "extra_ids": self.extra_ids}

  def __setstate__(self, state):
    self.__init__(tokenizers_vocab.TokenizersText(state["file"], state["data"], state["extra_ids"]))

  def __eq__(self, other):
    return isinstance(other, TokenizersVocabulary) and self.__getstate__() == other.__getstate__()

  def __str__(self) -> str:
    return f"TokenizersVocabulary(file={self.file}, kind={self.kind}, size={self.vocab_size})"


def get_vocabulary(cfg, source, special: tuple[str, ...]):
  """The run's vocabulary: `tokenizer.path`, or one trained on the source (its `special` tokens single pieces)
  and cached."""
  t = cfg.tokenizer
  if t.path:
    return load(t.path, t.extra_ids)
  texts = source.texts("train", max_chars=t.max_chars) if t.kind != "bytes" else []
  return load(cached_model(texts, t.vocab_size, t.model_type, cache_dir(cfg.data), special, t.extra_ids, t.kind),
              t.extra_ids)
