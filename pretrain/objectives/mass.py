"""MASS (Song et al. 2019): masked sequence-to-sequence pre-training for the encoder-decoder.

Documents are joined into one stream and cut into segments. In each segment
of m tokens one fragment of k = round(m * data.mass_fraction) consecutive
tokens (at least one), starting at a uniform position, is replaced in the
inputs by one [MASK] per token; the targets are the fragment. The paper finds
k at about half of m best: the encoder must understand the unmasked tokens,
and the decoder, which sees only the fragment's own earlier tokens, must lean
on the encoder.
"""

import numpy as np

from pretrain import config, families, vocab
from pretrain.objectives import common
from pretrain.objectives.mlm import MASK_TOKEN
from pretrain.objectives.spec import Objective, Setting
from pretrain.system import tf_loader
from pretrain.system.errors import UserError

tf = tf_loader.Lazy("tensorflow")


def fragment_length(segment: int, fraction: float) -> int:
  """k of a segment of m tokens, in float32 as the preprocessor computes it."""
  return max(int(np.round(np.float32(segment) * np.float32(fraction))), 1)


def segment_length(sequence_length, fraction: float) -> int:
  """The longest segment whose inputs (the segment and EOS) and targets (its fragment and EOS) fit."""
  length = sequence_length["inputs"] - 1
  while length >= 2 and fragment_length(length, fraction) + 1 > sequence_length["targets"]:
    length -= 1
  if length < 2:
    raise UserError(f"inputs_length={sequence_length['inputs']} and targets_length={sequence_length['targets']} "
                    f"hold no MASS segment at data.mass_fraction={fraction}: the targets must hold the masked "
                    "fragment and EOS; raise targets_length")
  return length


def mass(dataset, sequence_length, output_features, *, seed: int, fraction: float):
  """seqio preprocessor: documents of 'targets' tokens -> {'inputs': masked segment, 'targets': the fragment}."""
  vocabulary = output_features["targets"].vocabulary
  mask_id, eos = vocab.single_piece_id(vocabulary, MASK_TOKEN), vocabulary.eos_id

  def make(example):
    tokens = example["targets"]
    n = tf.size(tokens)
    k = tf.maximum(tf.cast(tf.round(tf.cast(n, tf.float32) * fraction), tf.int32), 1)
    start = tf.random.stateless_uniform([], common.example_seed(tokens, seed), 0, n - k + 1, tf.int32)
    positions = tf.range(n)
    masked = (positions >= start) & (positions < start + k)
    return {"inputs": tf.concat([tf.where(masked, mask_id, tokens), [eos]], 0),
            "targets": tf.concat([tokens[start:start + k], [eos]], 0)}

  dataset = common.split_to_length(common.concatenate(dataset), segment_length(sequence_length, fraction))
  return dataset.map(make, num_parallel_calls=tf.data.AUTOTUNE)


class MASS(Objective):
  name, family, pieces = "mass", families.ENCODER_DECODER, (MASK_TOKEN,)
  settings = {"data.mass_fraction": Setting(0.5, config.OPEN_FRACTION, "share of each segment masked as one "
                                                                       "fragment (the paper's k / m)")}

  @classmethod
  def check(cls, cfg):
    segment_length(cls.family.task_lengths(cfg.data), cfg.data.mass_fraction)

  def preprocess(self, dataset, sequence_length, output_features):
    return mass(dataset, sequence_length, output_features, seed=self.seed, fraction=self.data.mass_fraction)

  def score_rows(self, context, continuation, vocabulary, task_lengths):
    """As its examples: the encoder reads the context and one [MASK] per continuation token (and EOS), the
    decoder writes the continuation."""
    mask_id = vocab.single_piece_id(vocabulary, MASK_TOKEN)
    context = families.cut_left(context, task_lengths["inputs"] - len(continuation) - 1)
    return [families.encoder_decoder_row([*context, *[mask_id] * len(continuation), vocabulary.eos_id],
                                         continuation, 0)]
