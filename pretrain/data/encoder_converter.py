"""seqio feature converters for encoder-only examples (MLM, and sentence pairs), which seqio lacks.

Task features `inputs` (masked), `targets` (original) and `weights` (1 where
the loss applies) have one length. They are padded, not packed: seqio's
packing finds each feature's length by its trailing zeros, which would cut the
0/1 weights; and MLM segments already fill the sequence length (only the last
of each group of concatenated documents is shorter), so packing gains little.
"""

from pretrain.system import tf_loader

tf = tf_loader.Lazy("tensorflow")
seqio = tf_loader.Lazy("seqio")


class EncoderFeatureConverter(seqio.FeatureConverter):
  TASK_FEATURES = {k: seqio.FeatureConverter.FeatureSpec(dtype=tf.int32) for k in ("inputs", "targets", "weights")}
  MODEL_FEATURES = {k: seqio.FeatureConverter.FeatureSpec(dtype=tf.int32)
                    for k in ("encoder_input_tokens", "encoder_target_tokens", "encoder_loss_weights",
                              "encoder_segment_ids", "encoder_positions")}
  PACKING_FEATURE_DTYPES = {}

  def __init__(self):
    super().__init__(pack=False)

  def _convert_example(self, features):
    length = tf.shape(features["inputs"])[0]
    return {"encoder_input_tokens": features["inputs"], "encoder_target_tokens": features["targets"],
            "encoder_loss_weights": features["weights"],
            "encoder_segment_ids": tf.cast(features["targets"] != 0, tf.int32),
            "encoder_positions": tf.range(length, dtype=tf.int32)}

  def _convert_features(self, ds, task_feature_lengths):
    ds = self._pack_or_pad(ds, task_feature_lengths)
    return ds.map(self._convert_example, num_parallel_calls=tf.data.AUTOTUNE)

  def get_model_feature_lengths(self, task_feature_lengths):
    return {k: task_feature_lengths["inputs"] for k in self.MODEL_FEATURES}


class PairFeatureConverter(EncoderFeatureConverter):
  """Sentence pairs (NSP, SOP): the encoder's features plus the pair's label, a feature of length 1."""
  TASK_FEATURES = {**EncoderFeatureConverter.TASK_FEATURES,
                   "pair_label": seqio.FeatureConverter.FeatureSpec(dtype=tf.int32)}
  MODEL_FEATURES = {**EncoderFeatureConverter.MODEL_FEATURES,
                    "encoder_pair_labels": seqio.FeatureConverter.FeatureSpec(dtype=tf.int32)}

  def _convert_example(self, features):
    return {**super()._convert_example(features), "encoder_pair_labels": features["pair_label"]}

  def get_model_feature_lengths(self, task_feature_lengths):
    return {**super().get_model_feature_lengths(task_feature_lengths), "encoder_pair_labels": 1}
