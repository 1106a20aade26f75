"""The vocabularies of the data path: each kind (pretrain/vocab/) as a seqio vocabulary, whose TensorFlow ops the
pipelines map, and the run's vocabulary, trained on its source once (cache.py) or read from tokenizer.path."""

import functools
import json

import numpy as np

from pretrain import vocab
from pretrain.system import tf_loader
from pretrain.system.data_cache import cache_dir
from pretrain.vocab import sentencepiece, tokenizers_json
from pretrain.vocab.cache import cached_model  # pylint: disable=unused-import  (the data path's, here)
# What the data path reads of any vocabulary, here beside the vocabularies it loads.
from pretrain.vocab.ids import (EOS_ID, EXTRA_IDS, PAD_ID, UNK_ID, bytes_per_id,  # pylint: disable=unused-import
                                first_regular_id, sentinel_id, single_piece_id)

tf = tf_loader.Lazy("tensorflow")
seqio = tf_loader.Lazy("seqio")


def load(path: str, extra_ids: int = vocab.EXTRA_IDS):
  """The vocabulary in a model file of any kind, with seqio's sentinels, as a seqio vocabulary."""
  data, kind = vocab.checked(path)
  if kind is sentencepiece.KIND:
    return SentencePieceVocabulary(path, extra_ids=extra_ids)
  return TokenizersVocabulary(kind.text(path, data, extra_ids))


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
    return sentencepiece.piece_bytes(self.sp_model, self.vocab_size)

  def __getstate__(self):  # What seqio compares (__eq__) and pickles: the model, not what is made of it.
    state = super().__getstate__()
    state.pop("tf_tokenizer", None)
    state.pop("piece_bytes", None)
    return state


class TokenizersVocabulary(seqio.Vocabulary):
  """A vocabulary of a `tokenizers` kind (pretrain/vocab/tokenizers_json.py) as seqio reads one. The data pipeline tokenizes
  once, into the token store, so its TensorFlow ops call the Rust tokenizer through tf.numpy_function."""

  def __init__(self, text: tokenizers_json.TokenizersText):
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
    self.__init__(vocab.from_bytes(state["file"], state["data"], state["extra_ids"]))

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
  texts = source.texts("train", max_chars=t.max_chars) if vocab.KINDS[t.kind].learns else []
  identity = json.dumps([source.identity("train"), t.max_chars], sort_keys=True, default=str)
  return load(cached_model(texts, t.vocab_size, t.model_type, cache_dir(cfg.data), special, t.extra_ids, t.kind,
                           identity), t.extra_ids)
