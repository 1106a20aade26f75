"""Pieces shared by the objectives: per-example seeds, concatenation, splitting."""

from __future__ import annotations

from pretrain import tf_loader

tf = tf_loader.Lazy("tensorflow")
vocab = tf_loader.Lazy("pretrain.data.vocab")


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
