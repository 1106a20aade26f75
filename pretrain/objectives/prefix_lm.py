"""Prefix LM: a segment split at a uniform random point into inputs and targets (or, with data.prefix_share,
at a fixed share of the segment)."""

from pretrain import config, families
from pretrain.objectives import common
from pretrain.objectives.spec import Objective, Setting
from pretrain.system import tf_loader
from pretrain.system.errors import UserError

tf = tf_loader.Lazy("tensorflow")


def segment_length(sequence_length, mode_token: str | None, decoder: bool) -> int:
  """The shorter of the two feature budgets, so that every split point fits both."""
  inputs_budget = sequence_length["inputs"] - (1 if mode_token else 0) - (0 if decoder else 1)
  targets_budget = sequence_length["targets"] - 1
  length = min(inputs_budget, targets_budget)
  if length < 2:
    raise UserError(f"inputs_length={sequence_length['inputs']} and targets_length={sequence_length['targets']} "
                    "are too short for prefix LM: raise both above 3")
  return length


def split_at_random_point(tokens, seed):
  """inputs = tokens[:k], targets = tokens[k:], k uniform in [1, len - 1]."""
  n = tf.size(tokens)
  k = tf.random.stateless_uniform([], seed, minval=1, maxval=tf.maximum(n, 2), dtype=tf.int32)
  return {"inputs": tokens[:k], "targets": tokens[k:]}


def split_at_share(tokens, share: float):
  """inputs = tokens[:k], targets = tokens[k:], k = round(share * len) within [1, len - 1]."""
  n = tf.size(tokens)
  k = tf.clip_by_value(tf.cast(tf.round(share * tf.cast(n, tf.float32)), tf.int32), 1, tf.maximum(n - 1, 1))
  return {"inputs": tokens[:k], "targets": tokens[k:]}


def prefix_lm(dataset, sequence_length, output_features, *, seed: int, mode_token: str | None = None,
              decoder: bool = False, salt: int = 0, share: float = 0.0):
  """seqio preprocessor: documents of 'targets' tokens -> {'inputs', 'targets'} examples; `share` > 0 fixes the
  prefix's share of each segment (0: a uniform random split point)."""
  dataset = common.split_to_length(common.concatenate(dataset), segment_length(sequence_length, mode_token, decoder))
  if share:
    split = lambda ex: split_at_share(ex["targets"], share)
  else:
    split = lambda ex: split_at_random_point(ex["targets"], common.example_seed(ex["targets"], seed, salt))
  dataset = dataset.map(split, num_parallel_calls=tf.data.AUTOTUNE)
  return common.finish(dataset, output_features["targets"].vocabulary, mode_token, decoder)


class PrefixLM(Objective):
  """Inputs and targets for the encoder-decoder."""
  name, family = "prefix_lm", families.ENCODER_DECODER
  settings = {"data.prefix_share": Setting(0.0, config.BELOW_ONE, "the prefix's share of each segment (0: a "
                                                                  "uniform random split point, T5's)")}

  @classmethod
  def check(cls, cfg):
    segment_length(cls.family.task_lengths(cfg.data), None, cls.family.prefix_lm)

  def preprocess(self, dataset, sequence_length, output_features):
    return prefix_lm(dataset, sequence_length, output_features, seed=self.seed, decoder=self.family.prefix_lm,
                     share=self.data.prefix_share)

  def score_rows(self, context, continuation, vocabulary, task_lengths):
    """The context as its inputs, the continuation as its targets (no sentinel)."""
    return self.family.score_rows(context, continuation, vocabulary, task_lengths, span=False)


class PrefixLMDecoder(PrefixLM):
  """The same examples as one row of the decoder-only model, its prefix read bidirectionally."""
  name, family = "prefix_lm_decoder", families.PREFIX_LM
