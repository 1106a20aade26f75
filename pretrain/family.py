"""Model families: what sits between an objective's examples and a model.

A family owns, for one kind of model, everything that depends on that kind:
the seqio feature converter that packs the task's features, the model's input
features (the converter's), building the Flax module from the config, the
example inputs that fix its shapes, the forward pass, the loss and its
metrics, the tokens and FLOPs of a row, generation, and the Hugging Face
architecture it exports to. An objective names its family (`pretrain.data.objectives`); no
other module switches on families or model classes.

A new family is a subclass here (plus its module in pretrain/models/).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from pretrain import models
from pretrain.errors import UserError
from pretrain.models import decoding, layers
from pretrain.train import flops, losses

EOS_ID = 1  # seqio's, and the vocabularies' (pretrain.data.vocab)


# Model features of a packed row (seqio's feature converters and pretrain/data/encoder_converter.py).
DECODER_FEATURES = ("decoder_target_tokens", "decoder_input_tokens", "decoder_loss_weights", "decoder_segment_ids",
                    "decoder_positions")
ENCODER_FEATURES = ("encoder_input_tokens", "encoder_target_tokens", "encoder_loss_weights", "encoder_segment_ids",
                    "encoder_positions")


class Family:
  name: str           # how messages and reports call it
  architecture: str   # families of one architecture train the same model (and evaluate each other's tasks)
  hf: str | None      # the Hugging Face architecture it exports to (a key of pretrain.hf.EXPORTS), or None
  task_features: tuple[str, ...] = ("inputs", "targets")
  inputs_end_with_eos: bool = False
  generates: bool = True   # whether its model writes text (generate, samples)
  prefix_lm: bool = False  # a decoder-only model reading a bidirectional prefix

  def __repr__(self) -> str:
    return f"<family {self.name}>"

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
    the data stack, so the model side runs where TensorFlow is not installed (tests/test_bench.py)."""
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
    return (jnp.zeros((1, sum(self.row_lengths(task_lengths).values())), jnp.int32),)

  def forward(self, model, params, batch, dropout_rng=None):
    raise NotImplementedError

  def targets_and_weights(self, batch):
    """The tokens to predict and where the loss applies."""
    return batch["decoder_target_tokens"], batch["decoder_loss_weights"]

  # The loss and its metrics.
  def loss_sums(self, model, params, batch, loss_cfg, rng=None) -> dict:
    """Sums over a batch: 'loss', the loss optimised, whose gradient the train step divides by the batch's
    'weight' (here the target tokens; an objective with terms of another kind adds each term's mean times the
    weight), and what the metrics need. `rng`: training (dropout); None: evaluation, deterministic."""
    logits_BLV = self.forward(model, params, batch, rng)
    targets_BL, weights_BL = self.targets_and_weights(batch)
    return losses.loss_sums(logits_BLV, targets_BL, weights_BL, loss_cfg.z_loss, loss_cfg.label_smoothing)

  def train_metrics(self, sums) -> dict:
    """The train step's metrics from its sums (traced arrays)."""
    weight = jnp.maximum(sums["weight"], 1.0)
    return {"loss": sums["loss"] / weight, "cross_entropy": sums["cross_entropy"] / weight,
            "z_loss": sums["z_loss"] / weight, "accuracy": sums["correct"] / weight}

  def eval_metrics(self, totals: dict[str, float]) -> dict[str, float]:
    """Validation metrics from the sums over all batches: loss (what is optimised, without z-loss or smoothing),
    accuracy and, for a token loss, perplexity."""
    loss = totals["cross_entropy"] / max(totals["weight"], 1.0)
    return {"loss": loss, "accuracy": totals["correct"] / max(totals["weight"], 1.0),
            "perplexity": math.exp(min(loss, 50.0))}

  def row_lengths(self, task_lengths: dict[str, int]) -> dict[str, int]:
    """Tokens each row puts through the model: {'targets': the row}, or {'inputs', 'targets'} for an encoder and
    a decoder (a prefix-LM row holds inputs and targets; an MLM row is one sequence)."""
    return {"targets": sum(task_lengths.values())}

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

  def check_prompt(self, prompt_tokens: int, max_new_tokens: int, task_lengths: dict[str, int]) -> None:
    """Refuses a prompt and continuation longer than the rows the model was trained on."""
    raise UserError(f"an {self.name} model does not generate text; generate with a decoder-only or "
                    "encoder-decoder run")

  def generate(self, model, params, prompts: list[list[int]], max_new_tokens: int, rng, *,
               sentinel: int, **sampling) -> list[list[int]]:
    """Continuations of each prompt (token ids), cut at EOS. `sampling`: temperature, top_k, top_p, num_valid."""
    raise UserError(f"an {self.name} model does not generate text")

  def check_exportable(self) -> None:
    if self.hf is None:
      raise UserError(f"an {self.name} model has no Hugging Face export here; export decoder-only (Llama), "
                      "encoder-decoder (T5) or ELECTRA (its discriminator) runs")


def _until_eos(rows) -> list[list[int]]:
  rows = np.asarray(jax.device_get(rows)).tolist()
  return [row[:row.index(EOS_ID)] if EOS_ID in row else row for row in rows]


class CausalLM(Family):
  name, architecture, hf = "decoder-only", "llama", "llama"
  task_features = ("targets",)

  def task_lengths(self, data_cfg):
    return {"targets": data_cfg.seq_len}

  def converter(self):
    import seqio  # pylint: disable=g-import-not-at-top  (the data stack; the model code does not need it)
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
    return model.apply({"params": params}, batch["decoder_input_tokens"], batch["decoder_segment_ids"],
                       batch["decoder_positions"], batch.get("decoder_causal_attention"),
                       **models.mode(dropout_rng))

  def check_prompt(self, prompt_tokens: int, max_new_tokens: int, task_lengths) -> None:
    limit = sum(task_lengths.values())
    if prompt_tokens + 1 + max_new_tokens > limit:
      raise UserError(f"the prompt has {prompt_tokens} tokens and {max_new_tokens} new tokens are asked, more than "
                      f"the {limit} positions the model was trained on; shorten the prompt or --max_new_tokens")

  def generate(self, model, params, prompts, max_new_tokens, rng, *, sentinel, **sampling):
    del sentinel
    new = decoding.generate(model, params, jnp.asarray(prompts, jnp.int32), max_new_tokens, rng,
                            prefix_lm=self.prefix_lm, **sampling)
    return _until_eos(new)


class PrefixLM(CausalLM):
  """The decoder-only model reading the inputs bidirectionally (decoder_causal_attention) and predicting the
  targets; a row holds inputs + targets."""
  name = "decoder-only prefix-LM"
  task_features = ("inputs", "targets")
  prefix_lm = True

  def task_lengths(self, data_cfg):
    return Family.task_lengths(self, data_cfg)

  def converter(self):
    import seqio  # pylint: disable=g-import-not-at-top
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


class EncoderDecoder(Family):
  name, architecture, hf = "encoder-decoder", "t5", "t5"
  inputs_end_with_eos = True

  def converter(self):
    import seqio  # pylint: disable=g-import-not-at-top
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
    return jnp.zeros((1, task_lengths["inputs"]), jnp.int32), jnp.zeros((1, task_lengths["targets"]), jnp.int32)

  def row_lengths(self, task_lengths):
    return {"inputs": task_lengths["inputs"], "targets": task_lengths["targets"]}

  def attentions(self, model_cfg, task_lengths):
    s, t, decoder_layers = task_lengths["inputs"], task_lengths["targets"], model_cfg.num_decoder_layers
    decoder_layers = decoder_layers or model_cfg.num_layers
    return [(s, s, model_cfg.num_layers, {"bias": True}), (t, t, decoder_layers, {"bias": True}),
            (t, s, decoder_layers, {"cross": True})]

  def forward(self, model, params, batch, dropout_rng=None):
    return model.apply({"params": params}, batch["encoder_input_tokens"], batch["decoder_input_tokens"],
                       batch["encoder_segment_ids"], batch["decoder_segment_ids"], **models.mode(dropout_rng))

  def representations(self, model, params, tokens_BL):
    return model.apply({"params": params}, tokens_BL, method="encode")  # The encoder's output.

  def check_prompt(self, prompt_tokens, max_new_tokens, task_lengths):
    inputs = prompt_tokens + 2  # <extra_id_0> and EOS follow.
    if inputs > task_lengths["inputs"] or max_new_tokens > task_lengths["targets"]:
      raise UserError(f"the prompt takes {inputs} input tokens and {max_new_tokens} new tokens are asked; the model "
                      f"was trained on at most {task_lengths['inputs']} and {task_lengths['targets']}: shorten the "
                      "prompt or --max_new_tokens")

  def generate(self, model, params, prompts, max_new_tokens, rng, *, sentinel, **sampling):
    """The encoder reads each prompt followed by <extra_id_0> and EOS; the decoder writes what fills that span."""
    inputs = [p + [sentinel, EOS_ID] for p in prompts]
    longest = max(len(i) for i in inputs)
    inputs = [i + [0] * (longest - len(i)) for i in inputs]  # Id 0 is padding for the encoder.
    return _until_eos(decoding.generate_encoder_decoder(model, params, jnp.asarray(inputs, jnp.int32),
                                                        max_new_tokens, rng, **sampling))


class EncoderOnly(Family):
  """A bidirectional encoder predicting masked tokens (MLM); rows are padded, not packed."""
  name, architecture, hf = "encoder-only", "encoder-only", None
  generates = False
  task_features = ("inputs", "targets", "weights")

  def task_lengths(self, data_cfg):
    return dict.fromkeys(self.task_features, data_cfg.seq_len)

  def converter(self):
    from pretrain.data.encoder_converter import EncoderFeatureConverter  # pylint: disable=g-import-not-at-top
    return EncoderFeatureConverter()

  def model_lengths(self, task_lengths):
    return dict.fromkeys(ENCODER_FEATURES, task_lengths["inputs"])

  check = CausalLM.check  # The same layers.

  def build(self, model_cfg, vocabulary_size):
    return models.EncoderOnly(models.DecoderOnlyConfig.from_config(*models.resolve(model_cfg, vocabulary_size)))

  def row_lengths(self, task_lengths):
    return {"targets": task_lengths["inputs"]}  # The three task features describe one sequence.

  def forward(self, model, params, batch, dropout_rng=None):
    return model.apply({"params": params}, batch["encoder_input_tokens"], batch["encoder_segment_ids"],
                       batch["encoder_positions"], **models.mode(dropout_rng))

  def targets_and_weights(self, batch):
    return batch["encoder_target_tokens"], batch["encoder_loss_weights"]


def _ratio(a, b):
  """a / b of traced sums (0 where b is 0)."""
  return a / jnp.maximum(b, 1.0)


def _totals_ratio(a: float, b: float) -> float:
  return a / max(b, 1.0)


class SentencePairs(EncoderOnly):
  """The encoder with a sentence-pair head (models.PairEncoder), trained on MLM and, jointly, on whether the
  second segment of a pair continues the first: next-sentence (NSP) or sentence-order (SOP) prediction. A pair
  is one padded row, its label the feature `pair_label` (pretrain/data/objectives/sentence_pairs.py)."""
  architecture = "encoder-only with a pair head"
  task_features = ("inputs", "targets", "weights", "pair_label")

  def __init__(self, name: str):
    self.name = name

  def task_lengths(self, data_cfg):
    return {**dict.fromkeys(("inputs", "targets", "weights"), data_cfg.seq_len), "pair_label": 1}

  def converter(self):
    from pretrain.data.encoder_converter import PairFeatureConverter  # pylint: disable=g-import-not-at-top
    return PairFeatureConverter()

  def model_lengths(self, task_lengths):
    return {**dict.fromkeys(ENCODER_FEATURES, task_lengths["inputs"]), "encoder_pair_labels": 1}

  def random_batch(self, rows, task_lengths, vocab_size):
    batch = super().random_batch(rows, task_lengths, vocab_size)
    batch["encoder_pair_labels"] = np.random.default_rng(0).integers(0, 2, (rows, 1)).astype(np.int32)
    return batch

  def build(self, model_cfg, vocabulary_size):
    return models.PairEncoder(models.DecoderOnlyConfig.from_config(*models.resolve(model_cfg, vocabulary_size)))

  def representations(self, model, params, tokens_BL):
    _, state = model.apply({"params": params}, tokens_BL,
                           capture_intermediates=lambda module, method: module.name == "final_norm")
    return state["intermediates"]["encoder"]["final_norm"]["__call__"][0]

  def loss_sums(self, model, params, batch, loss_cfg, rng=None):
    """MLM's token sums plus the pair head's: its cross-entropy's mean over the pairs enters the loss times the
    masked tokens (the weight), so the step optimises MLM's mean plus the pair loss's mean, as BERT."""
    logits_BLV, pair_logits_B2 = self.forward(model, params, batch, rng)
    sums = losses.loss_sums(logits_BLV, batch["encoder_target_tokens"], batch["encoder_loss_weights"],
                            loss_cfg.z_loss, loss_cfg.label_smoothing)
    labels_B = batch["encoder_pair_labels"][:, 0]
    rows_B = jnp.any(batch["encoder_segment_ids"] > 0, axis=-1).astype(jnp.float32)  # not padding rows
    log_p_B2 = jax.nn.log_softmax(pair_logits_B2)
    pair_loss_B = -jnp.take_along_axis(log_p_B2, labels_B[:, None], axis=-1)[:, 0]
    sums.update(pair_loss=jnp.sum(pair_loss_B * rows_B), pairs=jnp.sum(rows_B),
                pair_correct=jnp.sum((jnp.argmax(pair_logits_B2, -1) == labels_B) * rows_B))
    sums["loss"] += _ratio(sums["pair_loss"], sums["pairs"]) * sums["weight"]
    return sums

  def train_metrics(self, sums):
    return {"loss": _ratio(sums["loss"], sums["weight"]), "mlm_loss": _ratio(sums["cross_entropy"], sums["weight"]),
            "mlm_accuracy": _ratio(sums["correct"], sums["weight"]), "z_loss": _ratio(sums["z_loss"], sums["weight"]),
            "pair_loss": _ratio(sums["pair_loss"], sums["pairs"]),
            "pair_accuracy": _ratio(sums["pair_correct"], sums["pairs"])}

  def eval_metrics(self, totals):
    mlm, pair = (_totals_ratio(totals["cross_entropy"], totals["weight"]),
                 _totals_ratio(totals["pair_loss"], totals["pairs"]))
    return {"loss": mlm + pair, "mlm_loss": mlm, "mlm_accuracy": _totals_ratio(totals["correct"], totals["weight"]),
            "pair_loss": pair, "pair_accuracy": _totals_ratio(totals["pair_correct"], totals["pairs"])}


class Electra(EncoderOnly):
  """ELECTRA's generator and discriminator (models.Electra) on MLM examples: the generator learns MLM, the
  discriminator replaced-token detection at every position; the discriminator is the model that is kept."""
  name, architecture, hf = "ELECTRA", "electra", "electra"

  def check(self, cfg):
    super().check(cfg)
    size = cfg.model.electra_generator_size
    if size > 1:
      raise UserError(f"model.electra_generator_size={size} makes the generator larger than the discriminator; "
                      "ELECTRA's generator is a fraction of it (the paper finds 1/4 to 1/2 best): use a value in "
                      "(0, 1]")
    heads = models.electra.generator_heads(cfg.model.num_heads, size)
    if heads % cfg.mesh.tensor:
      raise UserError(f"the ELECTRA generator's {heads} attention heads (model.electra_generator_size={size} of "
                      f"{cfg.model.num_heads}) do not split over mesh.tensor={cfg.mesh.tensor}; raise "
                      "model.electra_generator_size or lower mesh.tensor")

  def build(self, model_cfg, vocabulary_size):
    return models.Electra(models.DecoderOnlyConfig.from_config(*models.resolve(model_cfg, vocabulary_size)),
                          generator_size=model_cfg.electra_generator_size)

  def flops_per_example(self, params, model_cfg, task_lengths):
    """Every parameter's (the generator's too) and the discriminator's attention, plus what the rule leaves out:
    the generator's output through the tied embedding matrix and its attention."""
    length = self.row_lengths(task_lengths)["targets"]
    vocab, width = params["embed"]["embedding"].shape
    heads = models.electra.generator_heads(model_cfg.num_heads, model_cfg.electra_generator_size)
    tied_output = 0 if model_cfg.tie_embeddings else 6 * vocab * width * length
    return (super().flops_per_example(params, model_cfg, task_lengths) + tied_output
            + 12 * heads * model_cfg.head_dim * model_cfg.num_layers * length ** 2)

  def forward(self, model, params, batch, dropout_rng=None):
    """The model's outputs; the generator samples with a key of the step (a fixed one in evaluation)."""
    sample_rng = None
    if dropout_rng is not None:
      sample_rng, dropout_rng = jax.random.split(dropout_rng)
    return model.apply({"params": params}, batch["encoder_input_tokens"], batch["encoder_target_tokens"],
                       batch["encoder_loss_weights"], batch["encoder_segment_ids"], batch["encoder_positions"],
                       sample_rng, **models.mode(dropout_rng))

  def representations(self, model, params, tokens_BL):
    segments_BL = jnp.ones_like(tokens_BL)
    positions_BL = jnp.broadcast_to(jnp.arange(tokens_BL.shape[-1]), tokens_BL.shape)
    return model.apply({"params": params}, tokens_BL, segments_BL, positions_BL, method="discriminate")[1]

  def loss_sums(self, model, params, batch, loss_cfg, rng=None):
    """The generator's MLM sums plus the discriminator's over every token: ELECTRA's loss, the generator's mean
    cross-entropy plus loss.electra_discriminator_weight times the discriminator's mean binary cross-entropy
    (which enters times the masked tokens, the weight)."""
    out = self.forward(model, params, batch, rng)
    targets_BL, weights_BL = batch["encoder_target_tokens"], batch["encoder_loss_weights"]
    sums = losses.loss_sums(out["generator_logits"], targets_BL, weights_BL, loss_cfg.z_loss,
                            loss_cfg.label_smoothing)
    tokens_BL = (batch["encoder_segment_ids"] > 0).astype(jnp.float32)
    replaced_BL = models.electra.replaced(out["corrupted"], targets_BL, weights_BL)
    logits_BL = out["discriminator_logits"]
    bce_BL = jnp.logaddexp(0.0, logits_BL) - logits_BL * replaced_BL  # -log sigmoid(+-logit)
    said_BL = logits_BL > 0
    count = lambda x_BL: jnp.sum(x_BL * tokens_BL)
    sums.update(discriminator_loss=count(bce_BL), tokens=jnp.sum(tokens_BL), replaced=count(replaced_BL),
                said_replaced=count(said_BL), true_replaced=count(said_BL & replaced_BL),
                discriminator_correct=count(said_BL == replaced_BL))
    discriminator = loss_cfg.electra_discriminator_weight * _ratio(sums["discriminator_loss"], sums["tokens"])
    sums["loss"] += discriminator * sums["weight"]
    sums["joint"] = sums["cross_entropy"] + discriminator * sums["weight"]  # what eval/loss reports
    return sums

  def train_metrics(self, sums):
    metrics = {"loss": _ratio(sums["loss"], sums["weight"]), "z_loss": _ratio(sums["z_loss"], sums["weight"])}
    return {**metrics, **self._metrics(sums, _ratio)}

  def eval_metrics(self, totals):
    return {"loss": _totals_ratio(totals["joint"], totals["weight"]), **self._metrics(totals, _totals_ratio)}

  @staticmethod
  def _metrics(sums, ratio) -> dict:
    return {"generator_loss": ratio(sums["cross_entropy"], sums["weight"]),
            "generator_accuracy": ratio(sums["correct"], sums["weight"]),
            "discriminator_loss": ratio(sums["discriminator_loss"], sums["tokens"]),
            "discriminator_accuracy": ratio(sums["discriminator_correct"], sums["tokens"]),
            "discriminator_precision": ratio(sums["true_replaced"], sums["said_replaced"]),
            "discriminator_recall": ratio(sums["true_replaced"], sums["replaced"])}


class Contrastive(EncoderOnly):
  """Unsupervised SimCSE (Gao et al. 2021): two dropout views of each row, their mean final states
  (layers.mean_pool) compared by cosine / loss.contrastive_temperature, each row's other view the positive among
  every row of the global batch (in-batch negatives, gathered across data shards by the sharded matmul)."""
  name, architecture = "encoder-only contrastive", "sentence encoder"

  def check(self, cfg):
    super().check(cfg)
    if cfg.model.dropout <= 0:
      raise UserError("data.objective=contrastive learns from two dropout views of each row; set "
                      "model.dropout above 0 (SimCSE uses 0.1)")
    if cfg.train.batch_size < 2:
      raise UserError(f"data.objective=contrastive takes its negatives from the other rows of the batch; "
                      f"train.batch_size={cfg.train.batch_size} has none: use at least 2 (SimCSE uses 64)")
    if cfg.train.microbatches > 1:
      raise UserError("data.objective=contrastive takes its negatives from the whole batch; set "
                      "train.microbatches=1 (microbatches would see only their own rows)")

  def build(self, model_cfg, vocabulary_size):
    config = models.DecoderOnlyConfig.from_config(*models.resolve(model_cfg, vocabulary_size))
    return models.EncoderOnly(config, outputs="hidden")

  def representations(self, model, params, tokens_BL):
    return model.apply({"params": params}, tokens_BL)

  def flops_per_example(self, params, model_cfg, task_lengths):
    return 2 * super().flops_per_example(params, model_cfg, task_lengths)  # Two views, each forward and back.

  def loss_sums(self, model, params, batch, loss_cfg, rng=None):
    """InfoNCE sums, and Wang & Isola's alignment (squared distance of the two views) and uniformity (over the
    pairs of rows of the first view). Evaluation draws its two views with a fixed key."""
    rng = jax.random.key(0) if rng is None else rng
    segments_BL = batch["encoder_segment_ids"]
    views = [layers.mean_pool(self.forward(model, params, batch, key), segments_BL)
             for key in jax.random.split(rng)]
    z1_BD, z2_BD = (v / jnp.maximum(jnp.linalg.norm(v, axis=-1, keepdims=True), 1e-12) for v in views)
    rows_B = jnp.any(segments_BL > 0, axis=-1)
    similarity_BB = z1_BD @ z2_BD.T / loss_cfg.contrastive_temperature
    similarity_BB = jnp.where(rows_B[None, :], similarity_BB, -1e9)  # padding rows are no candidates (finite: no NaN)
    positive_B = jnp.diagonal(similarity_BB)
    loss_B = jax.nn.logsumexp(similarity_BB, axis=-1) - positive_B
    valid_B = rows_B.astype(jnp.float32)
    others_BB = valid_B[:, None] * valid_B[None, :] * (1.0 - jnp.eye(len(valid_B)))
    distance_BB = jnp.maximum(2.0 - 2.0 * z1_BD @ z1_BD.T, 0.0)  # squared distance of unit vectors
    return {"loss": jnp.sum(jnp.where(rows_B, loss_B, 0.0)), "weight": jnp.sum(valid_B),
            "correct": jnp.sum((positive_B >= jnp.max(similarity_BB, axis=-1)) * valid_B),
            "alignment": jnp.sum(jnp.sum(jnp.square(z1_BD - z2_BD), -1) * valid_B),
            "uniformity": jnp.sum(jnp.exp(-2.0 * distance_BB) * others_BB), "pairs": jnp.sum(others_BB)}

  def train_metrics(self, sums):
    return {"loss": _ratio(sums["loss"], sums["weight"]), **self._metrics(sums, _ratio, jnp.log)}

  def eval_metrics(self, totals):
    return {"loss": _totals_ratio(totals["loss"], totals["weight"]),
            **self._metrics(totals, _totals_ratio, lambda x: math.log(max(x, 1e-30)))}

  @staticmethod
  def _metrics(sums, ratio, log) -> dict:
    return {"accuracy": ratio(sums["correct"], sums["weight"]), "alignment": ratio(sums["alignment"], sums["weight"]),
            "uniformity": log(ratio(sums["uniformity"], sums["pairs"]))}


CAUSAL_LM, PREFIX_LM, ENCODER_DECODER, ENCODER_ONLY = CausalLM(), PrefixLM(), EncoderDecoder(), EncoderOnly()
NSP, SOP, ELECTRA, CONTRASTIVE = (SentencePairs("encoder-only NSP"), SentencePairs("encoder-only SOP"), Electra(),
                                  Contrastive())
# The model family each objective (pretrain/data/objectives) trains; known without the data stack (TensorFlow).
OF_OBJECTIVE = {"clm": CAUSAL_LM, "span_corruption": ENCODER_DECODER, "prefix_lm": ENCODER_DECODER,
                "prefix_lm_decoder": PREFIX_LM, "ul2": ENCODER_DECODER, "ul2_decoder": PREFIX_LM, "mlm": ENCODER_ONLY,
                "fim": CAUSAL_LM, "bart": ENCODER_DECODER, "nsp": NSP, "sop": SOP, "electra": ELECTRA,
                "contrastive": CONTRASTIVE}


def of_objective(name: str) -> Family:
  if name not in OF_OBJECTIVE:
    raise UserError(f"unknown objective {name!r}; choose one of {', '.join(OF_OBJECTIVE)}")
  return OF_OBJECTIVE[name]
