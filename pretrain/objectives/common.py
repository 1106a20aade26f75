"""Pieces shared by the objectives: per-example seeds, concatenation, splitting, sentence ends."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pretrain import vocab
from pretrain.system import tf_loader

tf = tf_loader.Lazy("tensorflow")

SENTENCE_ENDS = (".", "!", "?")


def example_seed(tokens: tf.Tensor, seed: int, salt: int = 0) -> tf.Tensor:
  """A stateless-RNG seed from the objective's seed and the example's content.

  Objectives are pure functions of (example, seed): the same example gets the
  same noise whatever its position in the stream or the number of hosts.
  """
  fingerprint = tf.strings.to_hash_bucket_fast(tf.io.serialize_tensor(tokens), 2**62)
  return tf.stack([tf.constant(seed * 1_000_003 + salt, tf.int64), fingerprint])


def split_to_length(dataset: tf.data.Dataset, length: int, feature: str = "targets") -> tf.data.Dataset:
  """Cuts each example's `feature` into consecutive pieces of at most `length` tokens."""

  def split(example):
    tokens = example[feature]
    starts = tf.range(0, tf.size(tokens), length)
    pieces = tf.RaggedTensor.from_row_lengths(tokens, tf.minimum(length, tf.size(tokens) - starts))
    return tf.data.Dataset.from_tensor_slices({feature: pieces})

  return dataset.flat_map(split)


def concatenate(dataset: tf.data.Dataset, feature: str = "targets", documents: int = 128) -> tf.data.Dataset:
  """Joins the tokens of every `documents` consecutive documents into one stream (T5's reduce_concat_tokens)."""
  dataset = dataset.map(lambda ex: {feature: ex[feature]})
  dataset = dataset.padded_batch(documents, padded_shapes={feature: [-1]})
  # Padding is id 0, which no text token has.
  return dataset.map(lambda ex: {feature: tf.boolean_mask(tf.reshape(ex[feature], [-1]),
                                                          tf.reshape(ex[feature], [-1]) != 0)})


def finish_example(example: dict, mode_id: int | None, eos_id: int, decoder: bool) -> dict:
  """Prepends the mode token to the inputs and appends EOS: to the targets, and
  to the inputs of encoder-decoder examples (a decoder-only model reads the
  inputs as a prefix of the targets)."""
  inputs = example["inputs"]
  if mode_id is not None:
    inputs = tf.concat([[mode_id], inputs], 0)
  if not decoder:
    inputs = tf.concat([inputs, [eos_id]], 0)
  return {"inputs": inputs, "targets": tf.concat([example["targets"], [eos_id]], 0)}


def finish(dataset: tf.data.Dataset, vocabulary, mode_token: str | None, decoder: bool) -> tf.data.Dataset:
  """`finish_example` over a dataset; the mode token must be a single piece of the vocabulary."""
  mode_id = vocab.single_piece_id(vocabulary, mode_token) if mode_token else None
  return dataset.map(lambda ex: finish_example(ex, mode_id, vocabulary.eos_id, decoder),
                     num_parallel_calls=tf.data.AUTOTUNE)


# After a sentence's punctuation, inside its piece or as pieces of their own: '."', '.)' and '.\n' end sentences too.
_CLOSERS = "\"')]}\u201d\u2019\u00bb"


class SentenceEnds(NamedTuple):
  """Per id of a vocabulary: whether its piece ends in . ! or ? (closing quotes and brackets after it aside),
  whether whitespace follows that punctuation within the piece, whether the piece starts with whitespace, and
  whether it is closing quotes and brackets only. Byte pieces count as their character (a rare '?' is the byte
  <0x3F>); sentinels and special pieces end nothing."""
  terminal: np.ndarray
  spaced: np.ndarray
  starts_word: np.ndarray
  closer: np.ndarray

  def after(self, tokens: np.ndarray) -> np.ndarray:
    """The positions after which a sentence ends: after a terminal piece, and the closing pieces right after it,
    where whitespace follows (within the piece, at the start of the next, or the end of the text): 'io.BytesIO',
    '3.11' and '(e.g.,' end no sentence, '"Stop." Then' does."""
    closer = self.closer[tokens]
    last_word = np.maximum.accumulate(np.where(closer, -1, np.arange(len(tokens))))  # -1: closers lead the text
    terminal = (last_word >= 0) & self.terminal[tokens[np.maximum(last_word, 0)]]
    followed = np.append(self.starts_word[tokens[1:]], True) | self.spaced[tokens]
    return np.flatnonzero(terminal & followed) + 1


def sentence_ends(vocabulary) -> SentenceEnds:
  tables = SentenceEnds(*(np.zeros(vocabulary.vocab_size, bool) for _ in range(4)))
  for i, piece in enumerate(vocabulary.piece_bytes):
    if piece is None:  # Control ids, the objectives' tokens and the sentinels: no text.
      continue
    text = piece.decode("utf-8", errors="replace")  # A byte of a longer character: no space, no sentence end.
    stripped = text.rstrip(_CLOSERS + " \n\t")
    tables.terminal[i] = stripped.endswith(SENTENCE_ENDS)
    tables.spaced[i] = any(c.isspace() for c in text[len(stripped):])
    tables.starts_word[i] = text[:1].isspace()
    tables.closer[i] = bool(text) and not text.strip(_CLOSERS)
  return tables
