"""The decoder-only families: a causal LM, and the same model reading a bidirectional prefix (prefix LM)."""

import jax.numpy as jnp
import numpy as np

from pretrain import models
from pretrain.families import base
from pretrain.families.base import DECODER_FEATURES, Family, cut_left
from pretrain.models import decoding
from pretrain.system import tf_loader
from pretrain.system.errors import UserError
from pretrain.vocab import ids as vocab_ids


class CausalLM(Family):
  name, architecture, hf = "decoder-only", "llama", "llama"
  task_features = ("targets",)

  def task_lengths(self, data_cfg):
    return {"targets": data_cfg.seq_len}

  def converter(self):
    seqio = tf_loader.seqio()  # The data stack; the model code does not need it.
    return seqio.LMFeatureConverter(pack=True)

  def model_lengths(self, task_lengths):
    return dict.fromkeys(DECODER_FEATURES, task_lengths["targets"])

  def check(self, cfg):
    m = cfg.model
    if m.num_heads % m.num_kv_heads:
      raise UserError(f"model.num_heads ({m.num_heads}) must be a multiple of model.num_kv_heads ({m.num_kv_heads})")
    if m.head_dim % 2:
      raise UserError(f"model.head_dim must be even for rotary positions, got {m.head_dim}")

  def build(self, model_cfg, vocabulary_size):
    return models.DecoderOnly(models.DecoderOnlyConfig.from_config(*models.resolve(model_cfg, vocabulary_size)))

  def forward(self, model, params, batch, dropout_rng=None):
    return models.apply(model, params, batch["decoder_input_tokens"], batch["decoder_segment_ids"],
                        batch["decoder_positions"], batch.get("decoder_causal_attention"), dropout_rng=dropout_rng)

  def room(self, prompt_tokens: int, task_lengths) -> int:
    return sum(task_lengths.values()) - prompt_tokens

  def check_prompt(self, prompt_tokens: int, max_new_tokens: int, task_lengths, *, span=True) -> None:
    del span
    # The model reads its BOS, the prompt and all new tokens but the last: position prompt + new - 1 at most.
    limit = sum(task_lengths.values())
    if prompt_tokens + max_new_tokens > limit:
      raise UserError(f"the prompt has {prompt_tokens} tokens and {max_new_tokens} new tokens are asked, more than "
                      f"the {limit} positions the model was trained on; shorten the prompt or --max_new_tokens")

  def generate(self, model, params, prompts, max_new_tokens, rng, *, sentinel, **sampling):
    del sentinel
    new = decoding.generate(model, params, jnp.asarray(prompts, jnp.int32), max_new_tokens, rng,
                            prefix_lm=self.prefix_lm, **sampling)
    return base.until_eos(new)

  def generated_text(self, vocabulary, prompt, tokens):
    """What the continuation adds to the prompt's text, a space that starts it included."""
    return vocab_ids.continuation_text(vocabulary, prompt, tokens)

  def score_rows(self, context, continuation, vocabulary, task_lengths, *, span=True):
    """One row: the context, then the continuation scored, read from BOS as a training row (a prefix-LM model
    reads the context, and BOS, bidirectionally)."""
    context = cut_left(context, sum(task_lengths.values()) - len(continuation))
    tokens = np.asarray([*context, *continuation], np.int32)
    row = {"decoder_target_tokens": tokens, "decoder_input_tokens": np.concatenate([[0], tokens[:-1]]),
           "decoder_loss_weights": (np.arange(len(tokens)) >= len(context)).astype(np.int32),
           "decoder_segment_ids": np.ones_like(tokens), "decoder_positions": np.arange(len(tokens), dtype=np.int32)}
    if self.prefix_lm:
      row["decoder_causal_attention"] = (np.arange(len(tokens)) <= len(context)).astype(np.int32)
    return [row]


class PrefixLM(CausalLM):
  """The decoder-only model reading the inputs bidirectionally (decoder_causal_attention) and predicting the
  targets; a row holds inputs + targets."""
  name = "decoder-only prefix-LM"
  task_features = ("inputs", "targets")
  prefix_lm = True

  def task_lengths(self, data_cfg):
    return Family.task_lengths(self, data_cfg)

  def length_note(self, data_cfg) -> str | None:
    row = data_cfg.inputs_length + data_cfg.targets_length
    if data_cfg.seq_len == row:
      return None
    return (f"Note: a prefix-LM row holds data.inputs_length + data.targets_length = {row} tokens; data.seq_len="
            f"{data_cfg.seq_len}, a causal-LM row's length, is not read (to compare with a causal LM at its row "
            "length, set the two to sum to it)")

  def converter(self):
    seqio = tf_loader.seqio()
    return seqio.PrefixLMFeatureConverter(pack=True, loss_on_targets_only=True)

  def model_lengths(self, task_lengths):
    return dict.fromkeys((*DECODER_FEATURES, "decoder_causal_attention"),
                         task_lengths["inputs"] + task_lengths["targets"])

  def random_batch(self, rows, task_lengths, vocab_size):
    """The inputs (and the first target position) are the bidirectional prefix; the loss is on the targets."""
    batch = super().random_batch(rows, task_lengths, vocab_size)
    prefix = np.arange(sum(task_lengths.values())) <= task_lengths["inputs"]
    batch["decoder_causal_attention"] = np.tile(prefix.astype(np.int32), (rows, 1))
    batch["decoder_loss_weights"] = np.tile((~prefix).astype(np.int32), (rows, 1))
    return batch
