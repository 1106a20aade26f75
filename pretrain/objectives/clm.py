"""Causal LM: every document ends with EOS and is cut into pieces of at most
the target length, so no token is dropped; the feature converter packs them.

With data.context=stream (GPT's recipe) the documents, each with its EOS, are
one stream in the order they come, cut into rows of exactly the target length:
a row has no segments, so attention crosses the documents' boundaries, and the
last row of a stream is shorter (padded) rather than a token lost."""

from pretrain import config, families
from pretrain.objectives import common
from pretrain.objectives.spec import Objective, Setting
from pretrain.system import tf_loader

tf = tf_loader.Lazy("tensorflow")


def clm(dataset, sequence_length, output_features):
  eos = output_features["targets"].vocabulary.eos_id
  dataset = dataset.map(lambda ex: {"targets": tf.concat([ex["targets"], [eos]], 0)})
  return common.split_to_length(dataset, sequence_length["targets"])


def clm_stream(dataset, sequence_length, output_features):
  """The documents with their EOS as one stream, cut into rows of sequence_length['targets'] tokens."""
  eos = output_features["targets"].vocabulary.eos_id
  tokens = dataset.map(lambda ex: tf.concat([ex["targets"], [eos]], 0)).unbatch()
  return tokens.batch(sequence_length["targets"]).map(lambda row: {"targets": row})


class CLM(Objective):
  """Causal language modelling, the decoder-only default."""
  name, family = "clm", families.CAUSAL_LM
  scores_every_word = True
  settings = {"data.context": Setting("document", config.one_of("document", "stream"),
                                      "document: rows pack whole documents, attention stays within each; stream: "
                                      "the documents in order as one text cut into rows, attention across them")}

  @property
  def in_order(self) -> bool:
    return self.data is not None and self.data.get("context", "document") == "stream"

  def preprocess(self, dataset, sequence_length, output_features):
    if self.in_order:
      return clm_stream(dataset, sequence_length, output_features)
    return clm(dataset, sequence_length, output_features)
