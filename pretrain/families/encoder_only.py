"""The encoder-only family: a bidirectional encoder predicting masked tokens (MLM)."""

import numpy as np

from pretrain import models
from pretrain.families.base import ENCODER_FEATURES, Family, cut_left, encoder_row
from pretrain.families.decoder_only import CausalLM


class EncoderOnly(Family):
  """A bidirectional encoder predicting masked tokens (MLM); rows are padded, not packed."""
  name, architecture, hf = "encoder-only", "encoder-only", None
  generates = False
  task_features = ("inputs", "targets", "weights")

  def task_lengths(self, data_cfg):
    return dict.fromkeys(self.task_features, data_cfg.seq_len)

  def converter(self):
    # pylint: disable-next=g-import-not-at-top  (data stack: not for generate)
    from pretrain.data.encoder_converter import EncoderFeatureConverter
    return EncoderFeatureConverter()

  def model_lengths(self, task_lengths):
    return dict.fromkeys(ENCODER_FEATURES, task_lengths["inputs"])

  check = CausalLM.check  # The same layers.

  def build(self, model_cfg, vocabulary_size):
    return models.EncoderOnly(models.DecoderOnlyConfig.from_config(*models.resolve(model_cfg, vocabulary_size)))

  def row_lengths(self, task_lengths):
    return {"targets": task_lengths["inputs"]}  # The three task features describe one sequence.

  def position_limits(self, model_cfg, task_lengths):
    del model_cfg
    return {"encoder": task_lengths["inputs"]}

  def forward(self, model, params, batch, dropout_rng=None):
    return models.apply(model, params, batch["encoder_input_tokens"], batch["encoder_segment_ids"],
                        batch["encoder_positions"], dropout_rng=dropout_rng)

  def targets_and_weights(self, batch):
    return batch["encoder_target_tokens"], batch["encoder_loss_weights"]

  def score_rows(self, context, continuation, vocabulary, task_lengths, *, span=True):
    """Pseudo-log-likelihood (Salazar et al. 2020): a row per continuation token, that token replaced by [MASK]
    and predicted from everything else."""
    from pretrain import vocab as text_vocab  # pylint: disable=g-import-not-at-top  (only for a run's data)
    context = cut_left(context, task_lengths["inputs"] - len(continuation))
    tokens = np.asarray([*context, *continuation], np.int32)
    mask_id = text_vocab.single_piece_id(vocabulary, "[MASK]")
    rows = []
    for position in range(len(context), len(tokens)):
      masked = tokens.copy()
      masked[position] = mask_id
      rows.append(encoder_row(masked, tokens, np.arange(len(tokens)) == position))
    return rows
