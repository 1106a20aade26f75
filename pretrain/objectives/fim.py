"""Fill-in-the-middle (Bavarian et al. 2022), trained as plain causal LM.

With probability `rate` a document is cut at two uniform points into prefix,
middle and suffix and rearranged: PSM `<PRE> prefix <SUF> suffix <MID> middle`,
or (a `spm_rate` share of them) SPM `<PRE> <SUF> suffix <MID> prefix middle`.
Other documents stay as they are. Every document ends with EOS and is cut into
pieces of the target length, as for causal LM.
"""

from pretrain import config, families, vocab
from pretrain.objectives import common
from pretrain.objectives.spec import Objective, Setting
from pretrain.system import tf_loader

tf = tf_loader.Lazy("tensorflow")

FIM_TOKENS = ("<PRE>", "<SUF>", "<MID>")


def rearrange(tokens, seed, *, rate: float, spm_rate: float, pre: int, suf: int, mid: int):
  seeds = tf.random.experimental.stateless_split(seed, 2)
  n = tf.size(tokens)
  cuts = tf.sort(tf.random.stateless_uniform([2], seeds[0], minval=0, maxval=n + 1, dtype=tf.int32))
  prefix, middle, suffix = tokens[:cuts[0]], tokens[cuts[0]:cuts[1]], tokens[cuts[1]:]
  psm = tf.concat([[pre], prefix, [suf], suffix, [mid], middle], 0)
  spm = tf.concat([[pre, suf], suffix, [mid], prefix, middle], 0)
  draws = tf.random.stateless_uniform([2], seeds[1])
  fim = tf.cond(draws[1] < spm_rate, lambda: spm, lambda: psm)
  return tf.cond(draws[0] < rate, lambda: fim, lambda: tokens)


def fim(dataset, sequence_length, output_features, *, seed: int, rate: float = 0.5, spm_rate: float = 0.5):
  vocabulary = output_features["targets"].vocabulary
  pre, suf, mid = (vocab.single_piece_id(vocabulary, t) for t in FIM_TOKENS)
  eos = vocabulary.eos_id

  def transform(example):
    tokens = example["targets"]
    arranged = rearrange(tokens, common.example_seed(tokens, seed), rate=rate, spm_rate=spm_rate,
                         pre=pre, suf=suf, mid=mid)
    return {"targets": tf.concat([arranged, [eos]], 0)}

  dataset = dataset.map(transform, num_parallel_calls=tf.data.AUTOTUNE)
  return common.split_to_length(dataset, sequence_length["targets"])


class FIM(Objective):
  name, family, pieces = "fim", families.CAUSAL_LM, FIM_TOKENS
  settings = {"data.fim_rate": Setting(0.5, config.FRACTION, "share of documents rearranged"),
              "data.fim_spm_rate": Setting(0.5, config.FRACTION, "share of those in SPM rather than PSM order")}

  def preprocess(self, dataset, sequence_length, output_features):
    return fim(dataset, sequence_length, output_features, seed=self.seed, rate=self.data.fim_rate,
               spm_rate=self.data.fim_spm_rate)
