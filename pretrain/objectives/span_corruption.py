"""T5 span corruption, exactly as in T5 (`random_spans_noise_mask`, `denoise`,
`random_spans_helper`).

A segment of L tokens gets round(L * density) noise tokens (clipped to
[1, L-1]) in max(round(noise / mean_span), 1) spans; noise and non-noise counts
are each split into that many positive parts, every split equally likely, and
interleaved non-noise first. Each noise span becomes one sentinel in the
inputs, counting down from `<extra_id_0>` (the highest id); the targets hold
each sentinel followed by the span it replaced.
"""

import bisect
import dataclasses

import numpy as np

from pretrain import config, families, vocab
from pretrain.objectives import common
from pretrain.objectives.spec import Objective, Setting
from pretrain.system import tf_loader
from pretrain.system.errors import UserError

seqio = tf_loader.Lazy("seqio")
tf = tf_loader.Lazy("tensorflow")


@dataclasses.dataclass(frozen=True)
class SpanCorruption:
  noise_density: float = 0.15
  mean_noise_span_length: float = 3.0

  def check(self) -> None:
    if not 0.0 < self.noise_density < 1.0:
      raise UserError(f"noise_density must be in (0, 1), got {self.noise_density}")
    if self.mean_noise_span_length < 1.0:
      raise UserError(f"mean_noise_span_length must be at least 1, got {self.mean_noise_span_length}")

  def describe(self) -> str:
    return f"(mean_noise_span_length={self.mean_noise_span_length:g}, noise_density={self.noise_density:g})"


def lengths_of(segment_length: int, spec: SpanCorruption) -> tuple[int, int, int]:
  """(inputs, targets, spans) lengths for a segment, each with one EOS, counted as random_spans_noise_mask
  makes them (in float32, with at least one noise token and one span). T5's own helper counts
  round(noise / mean) spans, which can be 0: its inputs then come out one token longer than it says, and
  seqio cuts their last token, the EOS."""
  noise = int(np.round(np.float32(segment_length) * np.float32(spec.noise_density)))
  noise = min(max(noise, 1), segment_length - 1)
  spans = max(int(np.round(np.float32(noise) / np.float32(spec.mean_noise_span_length))), 1)
  spans = min(spans, segment_length - noise)
  return segment_length - noise + spans + 1, noise + spans + 1, spans


def random_spans_helper(inputs_length: int, spec: SpanCorruption) -> tuple[int, int]:
  """The raw segment length whose corrupted inputs (with EOS) fill `inputs_length`, and the targets length."""
  # The inputs grow with the segment, so bisect for the longest that fits; inputs_length - 1 always does.
  longest = int(inputs_length / (1.0 - spec.noise_density)) + 2  # Its inputs exceed inputs_length.
  tokens_length = bisect.bisect_right(range(longest), inputs_length,
                                      lo=inputs_length - 1, key=lambda n: lengths_of(max(n, 2), spec)[0]) - 1
  _, targets_length, _ = lengths_of(tokens_length, spec)
  # As T5: at density 0.5, make targets equal inputs, the rounder number.
  if spec.noise_density == 0.5 and targets_length > inputs_length:
    tokens_length -= 1
    targets_length -= 1
  return tokens_length, targets_length


def random_spans_noise_mask(length, spec: SpanCorruption, seeds):
  """Boolean [length] noise mask; `seeds` is a [2, 2] tensor of stateless seeds."""
  orig_length = length
  length = tf.maximum(length, 2)  # Avoids degenerate segments; the mask is cut back below.
  num_noise = tf.cast(tf.round(tf.cast(length, tf.float32) * spec.noise_density), tf.int32)
  num_noise = tf.minimum(tf.maximum(num_noise, 1), length - 1)
  num_spans = tf.cast(tf.round(tf.cast(num_noise, tf.float32) / spec.mean_noise_span_length), tf.int32)
  num_spans = tf.maximum(num_spans, 1)
  num_nonnoise = length - num_noise
  # Every noise span follows a non-noise run, so there can be no more spans than
  # non-noise tokens; T5 fails on such tiny segments, here they get fewer spans.
  num_spans = tf.minimum(num_spans, num_nonnoise)

  def random_segmentation(num_items, num_segments, seed):
    """Lengths of `num_segments` positive parts summing to `num_items`, uniformly."""
    first_in_segment = tf.pad(
        seqio.stateless_shuffle(tf.cast(tf.range(num_items - 1) < num_segments - 1, tf.int32), seed), [[1, 0]])
    segment_id = tf.cumsum(first_in_segment)
    return tf.math.segment_sum(tf.ones_like(segment_id), segment_id)

  noise_lengths = random_segmentation(num_noise, num_spans, seeds[0])
  nonnoise_lengths = random_segmentation(num_nonnoise, num_spans, seeds[1])
  interleaved = tf.reshape(tf.stack([nonnoise_lengths, noise_lengths], axis=1), [num_spans * 2])
  span_starts = tf.cumsum(interleaved)[:-1]
  span_start_indicator = tf.math.unsorted_segment_sum(tf.ones_like(span_starts), span_starts, length)
  is_noise = tf.equal(tf.cumsum(span_start_indicator) % 2, 1)
  return is_noise[:orig_length]


def spans_to_sentinels(tokens, mask, first_sentinel: int):
  """Replaces each run of masked tokens by one sentinel, counting down from `first_sentinel`."""
  previous = tf.pad(mask[:-1], [[1, 0]])
  first = tf.logical_and(mask, tf.logical_not(previous))
  subsequent = tf.logical_and(mask, previous)
  sentinels = first_sentinel + 1 - tf.cumsum(tf.cast(first, tokens.dtype))
  return tf.boolean_mask(tf.where(first, sentinels, tokens), tf.logical_not(subsequent))


def corrupt(tokens, spec: SpanCorruption, seed, first_sentinel: int) -> dict:
  """{'inputs', 'targets'} of one segment, without EOS."""
  mask = random_spans_noise_mask(tf.size(tokens), spec, tf.random.experimental.stateless_split(seed, 2))
  return {"inputs": spans_to_sentinels(tokens, mask, first_sentinel),
          "targets": spans_to_sentinels(tokens, tf.logical_not(mask), first_sentinel)}


def check_lengths(spec: SpanCorruption, inputs_length: int, targets_length: int, num_sentinels: int,
                  name: str = "span corruption", reserved: int = 0) -> int:
  """The raw segment length, after checking that the feature lengths and sentinels suffice.

  `reserved` inputs positions are taken by a mode token.
  """
  spec.check()
  segment_length, needed_targets = random_spans_helper(inputs_length - reserved, spec)
  if segment_length < 2:
    raise UserError(f"inputs_length={inputs_length} is too short for {name} {spec.describe()}: "
                    "it cannot hold even one span; raise inputs_length")
  if targets_length < needed_targets:
    raise UserError(f"targets_length={targets_length} is too short for {name} {spec.describe()} at "
                    f"inputs_length={inputs_length}: it needs targets_length >= {needed_targets}")
  spans = lengths_of(segment_length, spec)[2]
  if spans > num_sentinels:
    raise UserError(f"{name} {spec.describe()} at inputs_length={inputs_length} makes up to {spans} spans, "
                    f"but the vocabulary has {num_sentinels} sentinels; raise tokenizer.extra_ids to {spans} or "
                    "more, lower inputs_length or raise mean_noise_span_length")
  return segment_length


def span_corruption(dataset, sequence_length, output_features, *, spec: SpanCorruption, seed: int,
                    mode_token: str | None = None, decoder: bool = False, salt: int = 0):
  """seqio preprocessor: documents of 'targets' tokens -> {'inputs', 'targets'} examples.

  Documents are concatenated and cut into raw segments sized so that the
  corrupted inputs fill `inputs_length` (as T5), so no token is dropped.
  """
  vocabulary = output_features["targets"].vocabulary
  segment_length = check_lengths(spec, sequence_length["inputs"], sequence_length["targets"], vocabulary.extra_ids,
                                 reserved=1 if mode_token else 0)
  first_sentinel = vocab.sentinel_id(vocabulary, 0)
  dataset = common.split_to_length(common.concatenate(dataset), segment_length)
  dataset = dataset.map(lambda ex: corrupt(ex["targets"], spec, common.example_seed(ex["targets"], seed, salt),
                                           first_sentinel), num_parallel_calls=tf.data.AUTOTUNE)
  return common.finish(dataset, vocabulary, mode_token, decoder)


class T5SpanCorruption(Objective):
  """T5's objective for the encoder-decoder."""
  name, family = "span_corruption", families.ENCODER_DECODER
  row_split = "longest_inputs"
  settings = {"data.noise_density": Setting(0.15, config.OPEN_FRACTION, "share of the tokens corrupted"),
              "data.mean_noise_span_length": Setting(3.0, config.Valid(lambda v: v >= 1, "at least 1"),
                                                     "mean tokens per corrupted span")}

  @classmethod
  def check(cls, cfg):
    check_lengths(cls._noise(cfg.data), cfg.data.inputs_length, cfg.data.targets_length, cfg.tokenizer.extra_ids)

  @staticmethod
  def _noise(data_cfg) -> SpanCorruption:
    return SpanCorruption(data_cfg.noise_density, data_cfg.mean_noise_span_length)

  def preprocess(self, dataset, sequence_length, output_features):
    return span_corruption(dataset, sequence_length, output_features, spec=self._noise(self.data), seed=self.seed)

  def span_rows(self, prefix, middle, suffix, vocabulary, task_lengths):
    """T5's own form: the encoder reads the text with the span replaced by <extra_id_0> (and EOS), the decoder
    writes <extra_id_0> and the span, scored."""
    sentinel = vocab.sentinel_id(vocabulary, 0)
    room = task_lengths["inputs"] - 2 - len(suffix)  # The sentinel, EOS and the text after the span stay whole.
    encoder = [*families.cut_left(prefix, max(room, 0)), sentinel, *suffix][-(task_lengths["inputs"] - 1):]
    return [families.encoder_decoder_row([*encoder, vocab.EOS_ID], [sentinel, *middle], 1)]
