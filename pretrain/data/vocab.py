"""SentencePiece vocabularies: training, caching by content, loading, checks.

Ids follow T5 and seqio: pad 0, eos 1, unk 2, no bos; sentinels (100 unless
tokenizer.extra_ids says otherwise) appended by seqio at load time,
`<extra_id_0>` the highest id. The objectives' special tokens (UL2 mode tokens,
FIM markers, the MLM mask: pretrain.objectives.pieces) are single pieces, ids 3
and up.
"""

import functools
import hashlib
import io
import json
import os
import sys

import numpy as np
import seqio
import sentencepiece as spm
import tensorflow as tf
from sentencepiece import sentencepiece_model_pb2

from pretrain import files, tf_loader
from pretrain.data import cache_lock, long_documents
from pretrain.data.sources import cache_dir
from pretrain.errors import UserError

PAD_ID, EOS_ID, UNK_ID = 0, 1, 2
EXTRA_IDS = 100  # Sentinels by default, as T5; tokenizer.extra_ids sets another count.
# SentencePiece skips longer sentences (its max_sentence_length); documents are fed paragraph by paragraph,
# a longer paragraph in pieces.
_MAX_LINE_BYTES = 4192


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
      for piece in long_documents.pieces(paragraph.encode("utf-8"), _MAX_LINE_BYTES):
        if piece.strip():
          yield piece.decode("utf-8")


def train_sentencepiece(texts, vocab_size: int, model_type: str, extra_ids: int, special: tuple[str, ...]) -> bytes:
  """Trains a model on an iterable of documents; `vocab_size` counts the `extra_ids` sentinels too, `special` are
  the tokens made single pieces."""
  pieces = vocab_size - extra_ids
  if pieces < 3 + len(special) + 256 + 30:
    raise UserError(f"tokenizer.vocab_size={vocab_size} is too small: it must exceed {extra_ids} sentinels, "
                    "3 control ids, the special tokens and 256 byte pieces by a few dozen pieces")
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


def cached_model(texts, vocab_size: int, model_type: str, cache: str, special: tuple[str, ...],
                 extra_ids: int = EXTRA_IDS) -> str:
  """Path of a model trained on `texts`, trained once per distinct text and options."""
  texts = list(texts)
  # How the text becomes training lines is part of the key: long paragraphs were once left out, now cut.
  lines = {"max_line_bytes": _MAX_LINE_BYTES, "long_paragraphs": "cut"}
  digest = hashlib.sha256(json.dumps([vocab_size, model_type, extra_ids, trainer_options(special), lines],
                                     sort_keys=True).encode())
  for text in texts:
    digest.update(hashlib.sha256(text.encode("utf-8")).digest())
  path = os.path.join(cache, "tokenizers", f"spm_{vocab_size}_{digest.hexdigest()[:16]}.model")

  def build():
    if os.path.exists(path):  # There, but not a model: damaged (cut short, overwritten).
      aside = f"{path}.damaged-{os.getpid()}"
      os.replace(path, aside)
      print(f"warning: the cached vocabulary {path} is not a SentencePiece model; moved aside to {aside}, "
            "training it again", file=sys.stderr, flush=True)
    print(f"Training a {vocab_size}-token SentencePiece vocabulary (once) -> {path}", file=sys.stderr, flush=True)
    files.write_atomically(path, train_sentencepiece(texts, vocab_size, model_type, extra_ids, special))

  cache_lock.build_once(path, lambda: _is_model(path), build)
  return path


def _is_model(path: str) -> bool:
  """Whether `path` holds a SentencePiece model (a cache entry may be cut short or overwritten)."""
  if not os.path.exists(path):
    return False
  try:
    with open(path, "rb") as f:
      processor = spm.SentencePieceProcessor(model_proto=f.read())
  except (RuntimeError, OSError):
    return False
  return processor.get_piece_size() > 0 and (processor.pad_id(), processor.eos_id(), processor.unk_id()) == (
      PAD_ID, EOS_ID, UNK_ID)


def load(path: str, extra_ids: int = EXTRA_IDS) -> seqio.SentencePieceVocabulary:
  """Loads a SentencePiece model with seqio's sentinels, checking the ids we rely on."""
  if not files.exists(path) or tf.io.gfile.isdir(path):
    raise UserError(f"vocabulary file {path!r} does not exist; give an existing .model file in "
                    "tokenizer.path, or leave it empty to train one")
  try:
    with tf.io.gfile.GFile(path, "rb") as f:  # Also from gs://, as seqio reads it.
      processor = spm.SentencePieceProcessor(model_proto=f.read())
  except (RuntimeError, OSError) as e:
    raise UserError(f"{path!r} is not a SentencePiece model ({e}); train one with `pretrain train-tokenizer`") from None
  ids = (processor.pad_id(), processor.eos_id(), processor.unk_id())
  if ids != (PAD_ID, EOS_ID, UNK_ID):
    raise UserError(f"{path!r} has pad/eos/unk ids {ids}, expected {(PAD_ID, EOS_ID, UNK_ID)}; "
                    "train a vocabulary with `pretrain train-tokenizer`")
  return SentencePieceVocabulary(path, extra_ids=extra_ids)


class SentencePieceVocabulary(seqio.SentencePieceVocabulary):
  """seqio's, with its TensorFlow tokenizer made once, eagerly and quietly. seqio makes one in each traced
  function, and the kernel that loads the model logs SentencePiece's "precompiled_charsmap is empty" (the
  identity normalizer) from a data thread, past any Python setting; made here, its line is held back
  (tf_loader.native_logs_hidden) and the traced functions share the one tokenizer."""

  @functools.cached_property
  def tf_tokenizer(self):
    with tf.init_scope(), tf_loader.native_logs_hidden():
      tokenizer = super().tf_tokenizer
      tokenizer.tokenize("")  # Runs the kernel that loads the model, and logs.
    return tokenizer

  def __getstate__(self):  # What seqio compares (__eq__) and pickles: the model, not the tokenizer made of it.
    state = super().__getstate__()
    state.pop("tf_tokenizer", None)
    return state


def single_piece_id(vocabulary: seqio.SentencePieceVocabulary, token: str) -> int:
  """The id of a special token, which must encode to exactly one piece."""
  ids = vocabulary.tokenizer.encode(token)
  ids = [i for i in ids if vocabulary.tokenizer.id_to_piece(i) != "▁"]
  if len(ids) != 1:
    raise UserError(f"the vocabulary encodes {token!r} as {len(ids)} pieces, not one; train a vocabulary "
                    "with `pretrain train-tokenizer`, which adds the special tokens as single pieces")
  return ids[0]


def sentinel_id(vocabulary: seqio.SentencePieceVocabulary, index: int) -> int:
  """The id of `<extra_id_{index}>`: sentinels count down from the top of the vocabulary."""
  return vocabulary.vocab_size - 1 - index


def bytes_per_id(vocabulary: seqio.SentencePieceVocabulary) -> np.ndarray:
  """The UTF-8 bytes of the text each id stands for: a piece's characters ('\u2581' is a space), 1 for a byte
  piece, 0 for control ids, the objectives' special pieces and the sentinels, which stand for no text. Bits per
  byte divide by their sum over the loss-bearing targets. The space SentencePiece puts before a document's first
  word counts: one byte per document that the text does not hold (about 0.1% of the bundled corpus's bytes)."""
  piece = sentencepiece_model_pb2.ModelProto.SentencePiece
  table = np.zeros(vocabulary.vocab_size, np.float32)
  for i, p in enumerate(sentencepiece_model_pb2.ModelProto.FromString(vocabulary.sp_model).pieces):
    if i < len(table) and p.type in (piece.NORMAL, piece.BYTE):
      table[i] = 1 if p.type == piece.BYTE else len(p.piece.replace("\u2581", " ").encode("utf-8"))
  return table


def get_vocabulary(cfg, source, special: tuple[str, ...]) -> seqio.SentencePieceVocabulary:
  """The run's vocabulary: `tokenizer.path`, or one trained on the source (its `special` tokens single pieces)
  and cached."""
  t = cfg.tokenizer
  if t.path:
    return load(t.path, t.extra_ids)
  texts = source.texts("train", max_chars=t.max_chars)
  return load(cached_model(texts, t.vocab_size, t.model_type, cache_dir(cfg.data), special, t.extra_ids),
              t.extra_ids)
