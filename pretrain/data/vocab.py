"""Vocabularies: training, caching by content, loading, and what the objectives read of them.

`tokenizer.kind` picks one: SentencePiece (unigram or BPE, `tokenizer.model_type`; the default), or WordPiece,
byte-level BPE or raw bytes (tokenizers_vocab.py). Ids follow T5 and seqio in every kind: pad 0, eos 1, unk 2,
no bos; sentinels (100 unless tokenizer.extra_ids says otherwise) appended at load time, `<extra_id_0>` the
highest id. The objectives' special tokens (UL2 mode tokens, FIM markers, the MLM mask:
pretrain.objectives.pieces) are single pieces, ids 3 and up, and the text's pieces follow them.

Each vocabulary has `file` (the model it was loaded from), `workdir_name` (that file's name in a run's workdir),
`identity` (bytes that tell it from any other), `kind`, and `piece_bytes`: the text each id stands for, which
bits per byte, MLM's random tokens and the sentence boundaries are computed from.
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
from pretrain.data import cache_lock, long_documents, tokenizers_vocab
from pretrain.data.sources import cache_dir
from pretrain.errors import UserError

PAD_ID, EOS_ID, UNK_ID = 0, 1, 2
EXTRA_IDS = 100  # Sentinels by default, as T5; tokenizer.extra_ids sets another count.
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
      for piece in long_documents.pieces(paragraph.encode("utf-8"), _MAX_LINE_BYTES):
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

  cache_lock.build_once(path, lambda: os.path.exists(path) and _parse(_read(path)) is not None, build)
  return path


def _read(path: str) -> bytes:
  with tf.io.gfile.GFile(path, "rb") as f:  # Also from gs://, as seqio reads it.
    return f.read()


def _parse(data: bytes):
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


def load(path: str, extra_ids: int = EXTRA_IDS):
  """Loads a SentencePiece model or a tokenizer.json with seqio's sentinels, checking the ids we rely on."""
  if not files.exists(path) or tf.io.gfile.isdir(path):
    raise UserError(f"vocabulary file {path!r} does not exist; give an existing .model or tokenizer .json file "
                    "in tokenizer.path, or leave it empty to train one")
  try:
    data = _read(path)
  except OSError as e:
    raise UserError(f"cannot read the vocabulary {path!r} ({e})") from None
  parsed = _parse(data)
  if parsed is None:
    raise UserError(f"{path!r} is neither a SentencePiece model nor a tokenizer.json of the kinds "
                    f"{', '.join(tokenizers_vocab.KINDS)}, with pad/eos/unk ids {(PAD_ID, EOS_ID, UNK_ID)}; train "
                    "one with `pretrain train-tokenizer`")
  if isinstance(parsed, spm.SentencePieceProcessor):
    return SentencePieceVocabulary(path, extra_ids=extra_ids)
  return tokenizers_vocab.TokenizersVocabulary(path, data, extra_ids=extra_ids)


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
    """The bytes each id stands for ('\u2581' is a space); None for control ids, the objectives' special pieces
    and the sentinels, which stand for no text."""
    piece = sentencepiece_model_pb2.ModelProto.SentencePiece
    pieces = sentencepiece_model_pb2.ModelProto.FromString(self.sp_model).pieces
    table = [None] * self.vocab_size
    for i, p in enumerate(pieces[:self.vocab_size]):
      if p.type == piece.BYTE:
        table[i] = bytes([int(p.piece[3:-1], 16)])
      elif p.type == piece.NORMAL:
        table[i] = p.piece.replace("\u2581", " ").encode("utf-8")
    return table

  def __getstate__(self):  # What seqio compares (__eq__) and pickles: the model, not what is made of it.
    state = super().__getstate__()
    state.pop("tf_tokenizer", None)
    state.pop("piece_bytes", None)
    return state


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


def get_vocabulary(cfg, source, special: tuple[str, ...]):
  """The run's vocabulary: `tokenizer.path`, or one trained on the source (its `special` tokens single pieces)
  and cached."""
  t = cfg.tokenizer
  if t.path:
    return load(t.path, t.extra_ids)
  texts = source.texts("train", max_chars=t.max_chars) if t.kind != "bytes" else []
  return load(cached_model(texts, t.vocab_size, t.model_type, cache_dir(cfg.data), special, t.extra_ids, t.kind),
              t.extra_ids)
