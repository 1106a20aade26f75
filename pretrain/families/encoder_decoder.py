"""The encoder-decoder family (T5 v1.1): inputs to the encoder, targets from the decoder."""

import jax.numpy as jnp
import numpy as np

from pretrain import models
from pretrain.families import base
from pretrain.families.base import EOS_ID, Family, cut_left, encoder_decoder_row
from pretrain.models import decoding
from pretrain.models.encoder_decoder import relative_position_bucket
from pretrain.system import tf_loader
from pretrain.system.errors import UserError


class EncoderDecoder(Family):
  name, architecture, hf = "encoder-decoder", "t5", "t5"
  inputs_end_with_eos = True

  def converter(self):
    seqio = tf_loader.seqio()
    return seqio.EncDecFeatureConverter(pack=True)

  def model_lengths(self, task_lengths):
    inputs, targets = task_lengths["inputs"], task_lengths["targets"]
    return {"encoder_input_tokens": inputs, "decoder_target_tokens": targets, "decoder_input_tokens": targets,
            "decoder_loss_weights": targets, "encoder_segment_ids": inputs, "decoder_segment_ids": targets,
            "encoder_positions": inputs, "decoder_positions": targets}

  def build(self, model_cfg, vocabulary_size):
    return models.EncoderDecoder(models.EncoderDecoderConfig.from_config(*models.resolve(model_cfg,
                                                                                         vocabulary_size)))

  def example_args(self, task_lengths):
    return np.zeros((1, task_lengths["inputs"]), np.int32), np.zeros((1, task_lengths["targets"]), np.int32)

  def row_lengths(self, task_lengths):
    return {"inputs": task_lengths["inputs"], "targets": task_lengths["targets"]}

  def position_limits(self, model_cfg, task_lengths):
    """T5's relative positions: a side that trained at offsets of its farthest bucket reads any length (longer
    offsets share that bucket, as lm-eval's hf backend reads T5 at 2048 tokens); else the length it trained at."""
    buckets, distance = model_cfg.relative_attention_num_buckets, model_cfg.relative_attention_max_distance
    def limit(length: int, bidirectional: bool) -> int | None:
      offset = length - 1 if bidirectional else 1 - length  # A key's offset from its query: the decoder's look back.
      farthest = relative_position_bucket(jnp.asarray(offset), bidirectional, buckets, distance)
      return None if int(farthest) == buckets - 1 else length
    return {"encoder": limit(task_lengths["inputs"], True), "decoder": limit(task_lengths["targets"], False)}

  def attentions(self, model_cfg, task_lengths):
    s, t, decoder_layers = task_lengths["inputs"], task_lengths["targets"], model_cfg.num_decoder_layers
    decoder_layers = decoder_layers or model_cfg.num_layers
    return [(s, s, model_cfg.num_layers, {"bias": True}), (t, t, decoder_layers, {"bias": True}),
            (t, s, decoder_layers, {"cross": True})]

  def forward(self, model, params, batch, dropout_rng=None):
    return models.apply(model, params, batch["encoder_input_tokens"], batch["decoder_input_tokens"],
                        batch["encoder_segment_ids"], batch["decoder_segment_ids"], dropout_rng=dropout_rng)

  def representations(self, model, params, tokens_BL):
    return model.apply({"params": params}, tokens_BL, method="encode")  # The encoder's output.

  def room(self, prompt_tokens, task_lengths):
    return task_lengths["targets"]

  def check_prompt(self, prompt_tokens, max_new_tokens, task_lengths, *, span=True):
    inputs = prompt_tokens + 1 + span  # EOS follows, after <extra_id_0> in the span form.
    if inputs > task_lengths["inputs"] or max_new_tokens > task_lengths["targets"]:
      raise UserError(f"the prompt takes {inputs} input tokens and {max_new_tokens} new tokens are asked; the model "
                      f"was trained on at most {task_lengths['inputs']} and {task_lengths['targets']}: shorten the "
                      "prompt or --max_new_tokens")

  def generate(self, model, params, prompts, max_new_tokens, rng, *, sentinel, **sampling):
    """The encoder reads each prompt followed by <extra_id_0> and EOS, and the decoder writes what fills that span;
    with no sentinel (a UL2 mode token's prefix form) the encoder reads the prompt and EOS, the decoder continues."""
    inputs = [p + ([] if sentinel is None else [sentinel]) + [EOS_ID] for p in prompts]
    longest = max(len(i) for i in inputs)
    inputs = [i + [0] * (longest - len(i)) for i in inputs]  # Id 0 is padding for the encoder.
    return base.until_eos(decoding.generate_encoder_decoder(model, params, jnp.asarray(inputs, jnp.int32),
                                                        max_new_tokens, rng, **sampling))

  def score_rows(self, context, continuation, vocabulary, task_lengths, *, span=True):
    """The sentinel form (`span`, as generate prompts): the encoder reads the context, <extra_id_0> and EOS, the
    decoder writes <extra_id_0> and then the continuation, scored. The prefix form: the encoder reads the context
    and EOS, the decoder writes the continuation. An empty context scores the continuation as a whole text."""
    if span:
      sentinel = vocabulary.vocab_size - 1  # <extra_id_0>: the sentinels count down from the top.
      return [encoder_decoder_row([*cut_left(context, task_lengths["inputs"] - 2), sentinel, EOS_ID],
                                  [sentinel, *continuation], 1)]
    return [encoder_decoder_row([*cut_left(context, task_lengths["inputs"] - 1), EOS_ID], continuation, 0)]
