"""What a model family is (Family), and what every family shares: the features of a packed row, the rows that
score text, and the ratios of the loss's sums.

A family owns, for one kind of model, everything that depends on that kind:
the seqio feature converter that packs the task's features, the model's input
features (the converter's), building the Flax module from the config, the
example inputs that fix its shapes, the forward pass, the loss and its
metrics, the tokens and FLOPs of a row, generation, scoring text by likelihood,
and the Hugging Face architecture it exports to. An objective names its family
(pretrain/objectives/); no other module switches on families or model classes.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from pretrain.system.errors import UserError
from pretrain.train import flops, losses

EOS_ID = 1  # seqio's, and the vocabularies' (pretrain.vocab.pipeline)


# Model features of a packed row (seqio's feature converters and pretrain/data/encoder_converter.py).
DECODER_FEATURES = ("decoder_target_tokens", "decoder_input_tokens", "decoder_loss_weights", "decoder_segment_ids",
                    "decoder_positions")
ENCODER_FEATURES = ("encoder_input_tokens", "encoder_target_tokens", "encoder_loss_weights", "encoder_segment_ids",
                    "encoder_positions")


class Family:
  name: str           # how messages and reports call it
  architecture: str   # families of one architecture train the same model (and evaluate each other's tasks)
  hf: str | None      # the Hugging Face architecture it exports to (the FAMILY of pretrain.hf.ARCHITECTURES), or None
  task_features: tuple[str, ...] = ("inputs", "targets")
  label_features: tuple[str, ...] = ()  # Task features of one value per example, not tokens of the row.
  inputs_end_with_eos: bool = False
  generates: bool = True   # whether its model writes text (generate, samples)
  prefix_lm: bool = False  # a decoder-only model reading a bidirectional prefix
  # Whether rows of several objectives can share its batches (data.schedule): its loss is the token loss here,
  # which reports each member's part; a family whose loss has terms of its own sets it False.
  mixes: bool = True
  # A joint family (joint()) trains the rows of these families too, and needs each row's member named in its
  # batches, in training and evaluation (batch['member']).
  joined: tuple = ()
  rows_named: bool = False
  moe: bool = True  # Whether its loss takes the terms of mixture-of-experts layers (losses.with_moe).

  def __repr__(self) -> str:
    return f"<family {self.name}>"

  def joint(self, member_families: list["Family"]) -> "Family | None":
    """The family that trains a schedule's members of these families (in member order) on one model, where
    this family's rows need one of their own (loss terms of its own beside another family's); None: no such
    family, or none needed."""
    return None

  def trains_same_model(self, other: "Family") -> bool:
    """Whether `other`'s examples train (and evaluate) this family's model: causal and prefix LM share one."""
    return self.architecture == other.architecture

  # Data: the task's feature lengths and the converter that turns them into model features.
  def task_lengths(self, data_cfg) -> dict[str, int]:
    return {"inputs": data_cfg.inputs_length, "targets": data_cfg.targets_length}

  def converter(self):
    raise NotImplementedError

  def model_lengths(self, task_lengths: dict[str, int]) -> dict[str, int]:
    """Length of every model feature, as the converter makes them (packing features included); known without
    the data stack, so the model side runs where TensorFlow is not installed (tests/bench/test_bench.py)."""
    raise NotImplementedError

  def abstract_batch(self, rows: int, task_lengths: dict[str, int], sharding=None) -> dict:
    return {k: jax.ShapeDtypeStruct((rows, n), jnp.int32, sharding=sharding)
            for k, n in self.model_lengths(task_lengths).items()}

  def random_batch(self, rows: int, task_lengths: dict[str, int], vocab_size: int) -> dict[str, np.ndarray]:
    """A batch shaped as the converter makes it: random tokens, one segment per row, loss everywhere."""
    rng = np.random.default_rng(0)
    batch = {}
    for name, n in self.model_lengths(task_lengths).items():
      if name.endswith("_tokens"):
        batch[name] = rng.integers(3, vocab_size, (rows, n)).astype(np.int32)
      elif name.endswith("_positions"):
        batch[name] = np.tile(np.arange(n, dtype=np.int32), (rows, 1))
      else:  # segment ids, loss weights
        batch[name] = np.ones((rows, n), np.int32)
    return batch

  # The model.
  def check(self, cfg) -> None:
    """Checks the config fields this family uses (others, e.g. a decoder-only field for T5, are not its business)."""

  def build(self, model_cfg, vocabulary_size: int):
    raise NotImplementedError

  def example_args(self, task_lengths: dict[str, int]) -> tuple:
    """Inputs of the model's shapes, to initialise it."""
    return (np.zeros((1, sum(self.row_lengths(task_lengths).values())), np.int32),)

  def forward(self, model, params, batch, dropout_rng=None):
    """(the model's outputs of the batch, what its MoE layers sowed: models.apply)."""
    raise NotImplementedError

  def targets_and_weights(self, batch):
    """The tokens to predict and where the loss applies."""
    return batch["decoder_target_tokens"], batch["decoder_loss_weights"]

  # The loss and its metrics.
  def loss_sums(self, model, params, batch, loss_cfg, rng=None, members: int = 0) -> dict:
    """Sums over a batch: 'loss', the loss optimised, whose gradient the train step divides by the batch's
    'weight' (here the target tokens; an objective with terms of another kind adds each term's mean times the
    weight), and what the metrics need. `rng`: training (dropout); None: evaluation, deterministic. `members`:
    how many members a schedule has, whose parts are summed too (batch['member'] names each row's)."""
    logits_BLV, moe_values = self.forward(model, params, batch, rng)
    targets_BL, weights_BL = self.targets_and_weights(batch)
    sums = losses.loss_sums(logits_BLV, targets_BL, weights_BL, loss_cfg.z_loss, loss_cfg.label_smoothing,
                            batch["member"] if members else None, members)
    return losses.with_moe(sums, moe_values, loss_cfg)

  def train_metrics(self, sums) -> dict:
    """The train step's metrics from its sums (traced arrays); with a schedule's members, each member's loss
    (cross-entropy), accuracy and weight as arrays."""
    weight = jnp.maximum(sums["weight"], 1.0)
    metrics = {"loss": sums["loss"] / weight, "cross_entropy": sums["cross_entropy"] / weight,
               "z_loss": sums["z_loss"] / weight, "accuracy": sums["correct"] / weight,
               **losses.moe_metrics(sums, ratio, per_layer=False)}
    if "member_weight" in sums:
      member_weight = jnp.maximum(sums["member_weight"], 1.0)
      metrics.update({"member_loss": sums["member_cross_entropy"] / member_weight,
                      "member_accuracy": sums["member_correct"] / member_weight,
                      "member_weight": sums["member_weight"]})
    return metrics

  def eval_metrics(self, totals: dict[str, float]) -> dict[str, float]:
    """Validation metrics from the sums over all batches: loss (what is optimised, without z-loss or smoothing),
    accuracy and, for a token loss, perplexity and bits per byte."""
    loss = totals["cross_entropy"] / max(totals["weight"], 1.0)
    return {"loss": loss, "accuracy": totals["correct"] / max(totals["weight"], 1.0),
            "perplexity": math.exp(min(loss, 50.0)), **bits_per_byte(totals),
            **losses.moe_metrics(totals, totals_ratio, per_layer=True)}

  def length_note(self, data_cfg) -> str | None:
    """A line for a run whose length fields say another row than the family's (data.seq_len beside a prefix-LM
    decoder's inputs + targets), else None."""
    return None

  def row_lengths(self, task_lengths: dict[str, int]) -> dict[str, int]:
    """Tokens each row puts through the model: {'targets': the row}, or {'inputs', 'targets'} for an encoder and
    a decoder (a prefix-LM row holds inputs and targets; an MLM row is one sequence)."""
    return {"targets": sum(task_lengths.values())}

  def reads_mode_tokens(self, task_lengths: dict[str, int]) -> bool:
    """Whether a UL2 mode token can begin what its model reads: the inputs of an encoder-decoder or a prefix-LM
    decoder (a causal LM reads its contexts as they are)."""
    return self.prefix_lm or "inputs" in self.row_lengths(task_lengths)

  def flops_per_example(self, params, model_cfg, task_lengths: dict[str, int]) -> float:
    return flops.flops_per_example(params, model_cfg, self.row_lengths(task_lengths))

  def attentions(self, model_cfg, task_lengths: dict[str, int]) -> list[tuple[int, int, int, dict]]:
    """Each kind of attention in a training step: (query length, key length, layers, what
    models.attention.choose needs to know of it)."""
    length = self.row_lengths(task_lengths)["targets"]
    return [(length, length, model_cfg.num_layers, {"prefix": self.prefix_lm})]

  # Using a trained model.
  def representations(self, model, params, tokens_BL):
    """The model's final hidden states [B, L, D] of unpacked rows of tokens (frozen features for a probe): the
    stack's output after its final norm, before the output layer."""
    _, state = model.apply({"params": params}, tokens_BL,
                           capture_intermediates=lambda module, method: module.name == "final_norm")
    return state["intermediates"]["final_norm"]["__call__"][0]

  def room(self, prompt_tokens: int, task_lengths: dict[str, int]) -> int:
    """How many new tokens the rows the model was trained on leave after a prompt."""
    return 0

  def check_prompt(self, prompt_tokens: int, max_new_tokens: int, task_lengths: dict[str, int], *,
                   span: bool = True) -> None:
    """Refuses a prompt and continuation longer than the rows the model was trained on; `span`: as generate's
    sentinel, an encoder-decoder's span form or prefix form."""
    raise UserError(f"an {self.name} model does not generate text; generate with a decoder-only or "
                    "encoder-decoder run")

  def generate(self, model, params, prompts: list[list[int]], max_new_tokens: int, rng, *,
               sentinel: int | None, **sampling) -> list[list[int]]:
    """Continuations of each prompt (token ids), cut at EOS. `sentinel`: the id an encoder-decoder reads after the
    prompt, to fill the span it marks (None: it continues the prompt). `sampling`: temperature, top_k, top_p,
    num_valid."""
    raise UserError(f"an {self.name} model does not generate text")

  def generated_text(self, vocabulary, prompt: list[int], tokens: list[int]) -> str:
    """The text of the `tokens` generate wrote for `prompt`."""
    return vocabulary.decode(tokens)

  # Scoring text by the model's likelihood (pretrain/downstream/likelihood.py: zero-shot tasks, lm-eval).
  def score_rows(self, context: list[int], continuation: list[int], vocabulary, task_lengths: dict[str, int], *,
                 span: bool = True) -> list[dict[str, np.ndarray]]:
    """Rows of model features (unbatched, unpadded) whose target log-probabilities, summed where their loss
    weights are 1, give log P(continuation | context) as this family's model reads text. The context is cut from
    the left to fit the lengths the model trained on, as lm-eval's backends cut it. `span`: an encoder-decoder
    fills a span after the context (the sentinel form) or continues it (the prefix form)."""
    raise UserError(f"an {self.name} model has no token predictions to score text by; score decoder-only, "
                    "encoder-decoder or masked-LM runs")

  def position_limits(self, model_cfg, task_lengths: dict[str, int]) -> dict[str, int | None]:
    """{'decoder' or 'encoder': the most tokens a scored row may give that side (None: any)}: the row it trained
    at, past which its positions (rotary) are ones the model never saw and scores there are not the model's."""
    del model_cfg
    return {"decoder": sum(task_lengths.values())}

  def token_logits(self, model, params, batch):
    """The model's logits [B, L, V] over its target tokens (families whose model has other outputs pick them)."""
    return self.forward(model, params, batch)[0]

  def token_logprobs(self, model, params, batch):
    """(log-probability of each target token [B, L], whether it is the model's greedy choice [B, L]), both where
    the loss weights are 1 (elsewhere 0 and True)."""
    targets_BL, weights_BL = self.targets_and_weights(batch)
    logits_BLV = self.token_logits(model, params, batch).astype(jnp.float32)
    logp_BL = jnp.take_along_axis(jax.nn.log_softmax(logits_BLV), targets_BL[..., None], axis=-1)[..., 0]
    scored_BL = weights_BL > 0
    return jnp.where(scored_BL, logp_BL, 0.0), ~scored_BL | (jnp.argmax(logits_BLV, -1) == targets_BL)

  def check_exportable(self) -> None:
    if self.hf is None:
      raise UserError(f"an {self.name} model has no Hugging Face export here; export decoder-only (Llama), "
                      "encoder-decoder (T5) or ELECTRA (its discriminator) runs")


def until_eos(rows) -> list[list[int]]:
  rows = np.asarray(jax.device_get(rows)).tolist()
  return [row[:row.index(EOS_ID)] if EOS_ID in row else row for row in rows]


def encoder_row(inputs: np.ndarray, targets: np.ndarray, scored: np.ndarray) -> dict[str, np.ndarray]:
  """An encoder row of features: one segment, the loss where `scored`."""
  return {"encoder_input_tokens": inputs, "encoder_target_tokens": targets,
          "encoder_loss_weights": scored.astype(np.int32), "encoder_segment_ids": np.ones_like(inputs),
          "encoder_positions": np.arange(len(inputs), dtype=np.int32)}


def cut_left(context: list[int], room: int) -> list[int]:
  """The context's last `room` tokens (none where there is no room)."""
  return list(context)[max(len(context) - max(room, 0), 0):]


def encoder_decoder_row(inputs: list[int], targets: list[int], scored_from: int) -> dict[str, np.ndarray]:
  """An encoder-decoder row of features: the decoder reads BOS and the targets shifted right, the loss on the
  targets from `scored_from` on."""
  inputs, targets = np.asarray(inputs, np.int32), np.asarray(targets, np.int32)
  return {"encoder_input_tokens": inputs, "encoder_segment_ids": np.ones_like(inputs),
          "encoder_positions": np.arange(len(inputs), dtype=np.int32),
          "decoder_target_tokens": targets, "decoder_input_tokens": np.concatenate([[0], targets[:-1]]).astype(np.int32),
          "decoder_loss_weights": (np.arange(len(targets)) >= scored_from).astype(np.int32),
          "decoder_segment_ids": np.ones_like(targets), "decoder_positions": np.arange(len(targets), dtype=np.int32)}


def bits_per_byte(totals: dict[str, float]) -> dict[str, float]:
  """{'bits_per_byte': the token loss summed in nats / ln 2 / the UTF-8 bytes of the target tokens' text}, where
  the evaluation counted bytes (totals['bytes'], pretrain.train.steps.make_eval_step); else {}."""
  if not totals.get("bytes"):
    return {}
  return {"bits_per_byte": totals["cross_entropy"] / math.log(2) / totals["bytes"]}


def ratio(a, b):
  """a / b of traced sums (0 where b is 0)."""
  return a / jnp.maximum(b, 1.0)


def totals_ratio(a: float, b: float) -> float:
  """a / b of evaluation totals (0 where b is 0)."""
  return a / max(b, 1.0)
