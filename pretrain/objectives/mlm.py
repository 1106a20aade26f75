"""BERT's masked language modelling.

Of each row's tokens (the EOS between documents aside), round(count * rate) are selected at random; of
those 80% become [MASK], 10% a random regular token and 10% stay as they are.
`weights` marks the selected positions: the loss is computed there only.
"""

from pretrain import config, families, vocab
from pretrain.objectives import common
from pretrain.objectives.spec import Objective, Setting
from pretrain.system import tf_loader
from pretrain.system.errors import UserError

tf = tf_loader.Lazy("tensorflow")

MASK_TOKEN = "[MASK]"
SETTINGS = {"data.mlm_rate": Setting(0.15, config.OPEN_FRACTION, "share of tokens selected (80% [MASK], 10% random, "
                                                                 "10% kept)")}


def mask_tokens(tokens, seed, *, rate: float, mask_id: int, random_ids: tuple[int, int], candidates=None):
  """{'inputs', 'targets', 'weights'} for one segment.

  `candidates` (bool, the shape of `tokens`) limits the selection to those positions, round(their number * rate)
  of them; None makes every position a candidate.
  """
  n = tf.size(tokens)
  seeds = tf.random.experimental.stateless_split(seed, 3)
  if candidates is None:
    candidates = tf.ones([n], tf.bool)
  count = tf.cast(tf.round(tf.cast(tf.reduce_sum(tf.cast(candidates, tf.int32)), tf.float32) * rate), tf.int32)
  # Non-candidates sort after every candidate; adding 0 leaves the draws, so the order, of all-candidate segments
  # as they were before `candidates` existed.
  order = tf.argsort(tf.random.stateless_uniform([n], seeds[0]) + tf.where(candidates, 0.0, 2.0))
  selected = tf.scatter_nd(order[:count, None], tf.ones([count], tf.bool), [n])
  action = tf.random.stateless_uniform([n], seeds[1])
  random_tokens = tf.random.stateless_uniform([n], seeds[2], minval=random_ids[0], maxval=random_ids[1],
                                              dtype=tf.int32)
  inputs = tf.where(selected & (action < 0.8), mask_id, tokens)
  inputs = tf.where(selected & (action >= 0.8) & (action < 0.9), random_tokens, inputs)
  return {"inputs": inputs, "targets": tokens, "weights": tf.cast(selected, tf.int32)}


def mlm(dataset, sequence_length, output_features, *, seed: int, rate: float = 0.15):
  """seqio preprocessor: documents of 'targets' tokens -> masked segments of the inputs length.

  Documents are joined into one stream with EOS after each, as RoBERTa's FULL-SENTENCES rows join them with a
  separator, and cut into rows of the full length (no shorter rows: BERT's short_seq_prob belongs to its sentence
  pairs, pretrain/objectives/sentence_pairs.py). The separators are never masked."""
  vocabulary = output_features["targets"].vocabulary
  mask_id, eos = vocab.single_piece_id(vocabulary, MASK_TOKEN), vocabulary.eos_id
  random_ids = (vocab.first_regular_id(vocabulary), vocabulary.vocab_size - vocabulary.extra_ids)
  dataset = dataset.map(lambda ex: {"targets": tf.concat([ex["targets"], [eos]], 0)})
  dataset = common.split_to_length(common.concatenate(dataset), sequence_length["inputs"])
  return dataset.map(lambda ex: mask_tokens(ex["targets"], common.example_seed(ex["targets"], seed), rate=rate,
                                            mask_id=mask_id, random_ids=random_ids, candidates=ex["targets"] != eos),
                     num_parallel_calls=tf.data.AUTOTUNE)


def check_masked(candidates: int, rate: float, what: str) -> None:
  """Refuses a row whose `candidates` tokens at data.mlm_rate would have no token masked (round(n * rate) of
  them are, half to even as tf.round): its MLM loss would have nothing to learn."""
  if round(candidates * rate) < 1:
    needed = next(n for n in range(candidates, candidates + 10_000) if round(n * rate) >= 1)
    raise UserError(f"{what} holds {candidates} tokens that MLM can mask, and data.mlm_rate={rate} masks "
                    f"round({candidates} x {rate}) = 0 of them: MLM would learn nothing; raise data.seq_len by "
                    f"{needed - candidates} or more, or data.mlm_rate")


class MLM(Objective):
  """BERT's masked language modelling for the encoder."""
  name, family, pieces, settings = "mlm", families.ENCODER_ONLY, (MASK_TOKEN,), SETTINGS

  @classmethod
  def check(cls, cfg):
    # A full row holds at least one document separator (EOS), which is never masked, unless one document fills it.
    check_masked(cfg.data.seq_len - 1, cfg.data.mlm_rate, f"a row of data.seq_len={cfg.data.seq_len}")

  def preprocess(self, dataset, sequence_length, output_features):
    return mlm(dataset, sequence_length, output_features, seed=self.seed, rate=self.data.mlm_rate)
