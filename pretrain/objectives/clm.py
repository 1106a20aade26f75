"""Causal LM: every document ends with EOS and is cut into pieces of at most
the target length, so no token is dropped; the feature converter packs them."""

from pretrain import families
from pretrain.objectives import common
from pretrain.objectives.spec import Objective
from pretrain.system import tf_loader

tf = tf_loader.Lazy("tensorflow")


def clm(dataset, sequence_length, output_features):
  eos = output_features["targets"].vocabulary.eos_id
  dataset = dataset.map(lambda ex: {"targets": tf.concat([ex["targets"], [eos]], 0)})
  return common.split_to_length(dataset, sequence_length["targets"])


class CLM(Objective):
  """Causal language modelling, the decoder-only default."""
  name, family = "clm", families.CAUSAL_LM
  scores_every_word = True

  def preprocess(self, dataset, sequence_length, output_features):
    return clm(dataset, sequence_length, output_features)
