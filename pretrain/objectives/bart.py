"""BART noising (Lewis et al. 2019): the inputs are a noised segment, the
targets the original.

The transformations compose, in BART's order: sentence permutation, document
rotation, token masking, token deletion, text infilling (span lengths drawn
from Poisson(3) until `infilling_rate` of the tokens are covered, each span
replaced by one [MASK], a zero-length span inserting one).
"""

import dataclasses

from pretrain import config, families, vocab
from pretrain.objectives import common
from pretrain.objectives.mlm import MASK_TOKEN
from pretrain.objectives.spec import Objective, Setting
from pretrain.system import tf_loader
from pretrain.system.errors import UserError

tf = tf_loader.Lazy("tensorflow")



@dataclasses.dataclass(frozen=True)
class BartNoise:
  permute_sentences: bool = True
  rotate: bool = False
  mask_rate: float = 0.0
  delete_rate: float = 0.0
  infilling_rate: float = 0.3
  poisson_lambda: float = 3.0

  def check(self) -> None:
    for name in ("mask_rate", "delete_rate", "infilling_rate"):
      if not 0.0 <= getattr(self, name) < 1.0:
        raise UserError(f"bart {name} must be in [0, 1), got {getattr(self, name)}")


def sentence_end_mask(tokens, ends: common.SentenceEnds):
  """Whether a sentence ends after each position: common.SentenceEnds.after, in TensorFlow."""
  terminal, spaced, starts_word, closer = (tf.constant(table) for table in ends)
  # Each position's last piece that is not a closing quote or bracket: its own, or the punctuation they close.
  words = tf.logical_not(tf.gather(closer, tokens))
  word_index = tf.cumsum(tf.cast(words, tf.int32)) - 1  # -1: closers that lead the segment
  word_tokens = tf.concat([[0], tf.boolean_mask(tokens, words)], 0)
  closed = tf.gather(terminal, tf.gather(word_tokens, word_index + 1)) & (word_index >= 0)
  return closed & (tf.concat([tf.gather(starts_word, tokens[1:]), [True]], 0) | tf.gather(spaced, tokens))


def permute_sentences(tokens, ends: common.SentenceEnds, seed):
  """Shuffles the sentences (runs of tokens closed as common.SentenceEnds.after says)."""
  is_end = sentence_end_mask(tokens, ends)
  sentence = tf.cumsum(tf.cast(is_end, tf.int32), exclusive=True)
  count = sentence[-1] + 1
  sentences = tf.RaggedTensor.from_value_rowids(tokens, sentence, nrows=count)
  order = tf.argsort(tf.random.stateless_uniform([count], seed))
  return tf.gather(sentences, order).flat_values


def rotate(tokens, seed):
  """Starts the segment at a uniform random token."""
  start = tf.random.stateless_uniform([], seed, minval=0, maxval=tf.maximum(tf.size(tokens), 1), dtype=tf.int32)
  return tf.concat([tokens[start:], tokens[:start]], 0)


def mask_random(tokens, seed, rate: float, mask_id: int):
  return tf.where(tf.random.stateless_uniform(tf.shape(tokens), seed) < rate, mask_id, tokens)


def delete_random(tokens, seed, rate: float):
  return tf.boolean_mask(tokens, tf.random.stateless_uniform(tf.shape(tokens), seed) >= rate)


def infill(tokens, seed, rate: float, lam: float, mask_id: int):
  """Text infilling: Poisson-length spans covering `rate` of the tokens, each one [MASK]."""
  n = tf.size(tokens)
  seeds = tf.random.experimental.stateless_split(seed, 2)
  target = tf.cast(tf.round(tf.cast(n, tf.float32) * rate), tf.int32)
  lengths = tf.cast(tf.random.stateless_poisson([n + 1], seeds[0], lam), tf.int32)
  ends = tf.cumsum(lengths)
  spans = tf.minimum(tf.reduce_sum(tf.cast(ends < target, tf.int32)) + 1, n + 1)  # Enough spans to cover `target`.
  spans = tf.where(target > 0, spans, 0)
  # The last span is cut so that the spans cover exactly `target` tokens.
  lengths = lengths[:spans]
  lengths = tf.concat([lengths[:-1], tf.reshape(target - tf.reduce_sum(lengths[:-1]), [-1])[:spans]], 0)
  masked = tf.reduce_sum(lengths)
  # Items: the n - masked kept tokens and one marker per span, the markers at uniform random places.
  items = n - masked + spans
  is_marker = tf.scatter_nd(tf.argsort(tf.random.stateless_uniform([items], seeds[1]))[:spans, None],
                            tf.ones([spans], tf.bool), [items])
  marker_index = tf.cumsum(tf.cast(is_marker, tf.int32), exclusive=True)
  consumed = tf.where(is_marker, tf.gather(tf.concat([lengths, [0]], 0), marker_index), 1)
  start = tf.cumsum(consumed, exclusive=True)
  return tf.where(is_marker, mask_id, tf.gather(tf.concat([tokens, [0]], 0), tf.minimum(start, n)))


def noise(tokens, seed, spec: BartNoise, ends: common.SentenceEnds, mask_id: int):
  seeds = tf.random.experimental.stateless_split(seed, 5)
  if spec.permute_sentences:
    tokens = permute_sentences(tokens, ends, seeds[0])
  if spec.rotate:
    tokens = rotate(tokens, seeds[1])
  if spec.mask_rate:
    tokens = mask_random(tokens, seeds[2], spec.mask_rate, mask_id)
  if spec.delete_rate:
    tokens = delete_random(tokens, seeds[3], spec.delete_rate)
  if spec.infilling_rate:
    tokens = infill(tokens, seeds[4], spec.infilling_rate, spec.poisson_lambda, mask_id)
  return tokens


def segment_length(sequence_length) -> int:
  """The original segment's length: both features hold it and an EOS."""
  length = min(sequence_length["inputs"], sequence_length["targets"]) - 1
  if length < 2:
    raise UserError("inputs_length and targets_length must be at least 3 for BART noising")
  return length


def bart(dataset, sequence_length, output_features, *, spec: BartNoise, seed: int):
  """seqio preprocessor: documents of 'targets' tokens -> {'inputs': noised, 'targets': original}."""
  spec.check()
  vocabulary = output_features["targets"].vocabulary
  mask_id = vocab.single_piece_id(vocabulary, MASK_TOKEN)
  ends = common.sentence_ends(vocabulary)
  length = segment_length(sequence_length)
  eos = vocabulary.eos_id

  def make(example):
    original = example["targets"]
    noised = noise(original, common.example_seed(original, seed), spec, ends, mask_id)
    # Zero-length infilling spans add tokens; in the rare segment where they outnumber the
    # tokens removed, the noised copy is cut (the original targets are kept whole).
    return {"inputs": tf.concat([noised[:length], [eos]], 0), "targets": tf.concat([original, [eos]], 0)}

  dataset = common.split_to_length(common.concatenate(dataset), length)
  return dataset.map(make, num_parallel_calls=tf.data.AUTOTUNE)


class Bart(Objective):
  """BART's noising for the encoder-decoder: sentence permutation and text infilling by default."""
  name, family, pieces = "bart", families.ENCODER_DECODER, (MASK_TOKEN,)
  settings = {"data.bart_permute_sentences": Setting(True, help="shuffle the sentences"),
              "data.bart_rotate": Setting(False, help="start at a random token"),
              "data.bart_mask_rate": Setting(0.0, config.BELOW_ONE, "share of tokens replaced by [MASK]"),
              "data.bart_delete_rate": Setting(0.0, config.BELOW_ONE, "share of tokens deleted"),
              "data.bart_infilling_rate": Setting(0.3, config.BELOW_ONE, "share of tokens in Poisson(3) spans, each "
                                                                         "replaced by one [MASK]")}

  @classmethod
  def check(cls, cfg):
    segment_length(cls.family.task_lengths(cfg.data))

  def preprocess(self, dataset, sequence_length, output_features):
    d = self.data
    spec = BartNoise(d.bart_permute_sentences, d.bart_rotate, d.bart_mask_rate, d.bart_delete_rate,
                     d.bart_infilling_rate)
    return bart(dataset, sequence_length, output_features, spec=spec, seed=self.seed)
