"""ELECTRA (Clark et al. 2020): replaced-token detection on MLM's examples.

A generator (a fraction of the discriminator's width, same depth, embeddings
shared) fills the masked positions by sampling; the discriminator tells each
token original or replaced. The loss is the generator's MLM loss plus a weight
times the discriminator's; the discriminator is the model that is kept
(models.Electra; exported as pretrain/hf/electra.py).
"""

import jax
import jax.numpy as jnp
import numpy as np

from pretrain import config, families, models
from pretrain.families import bits_per_byte, ratio, totals_ratio
from pretrain.objectives import mlm
from pretrain.objectives.spec import Setting
from pretrain.system.console import log
from pretrain.system.errors import UserError
from pretrain.train import losses


class ElectraFamily(families.EncoderOnly):
  """ELECTRA's generator and discriminator (models.Electra) on MLM examples: the generator learns MLM, the
  discriminator replaced-token detection at every position; the discriminator is the model that is kept."""
  name, architecture, hf = "ELECTRA", "electra", "electra"
  mixes = False

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
    """The generator and discriminator; says what size of generator model.electra_generator_size gave."""
    discriminator = models.DecoderOnlyConfig.from_config(*models.resolve(model_cfg, vocabulary_size))
    size = model_cfg.electra_generator_size
    g = models.electra.generator_config(discriminator, size)
    log(f"ELECTRA generator (model.electra_generator_size={size:g}): width {g.d_model} of {discriminator.d_model}, "
        f"feed-forward {g.mlp_dim} of {discriminator.mlp_dim}, {g.num_heads} heads of {discriminator.num_heads} "
        f"({g.head_dim} wide), {discriminator.num_layers} layers")
    return models.Electra(discriminator, generator_size=size)

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
    return models.apply(model, params, batch["encoder_input_tokens"], batch["encoder_target_tokens"],
                        batch["encoder_loss_weights"], batch["encoder_segment_ids"], batch["encoder_positions"],
                        sample_rng, dropout_rng=dropout_rng)

  def representations(self, model, params, tokens_BL):
    segments_BL = jnp.ones_like(tokens_BL)
    positions_BL = jnp.broadcast_to(jnp.arange(tokens_BL.shape[-1]), tokens_BL.shape)
    return model.apply({"params": params}, tokens_BL, segments_BL, positions_BL, method="discriminate")[1]

  def score_rows(self, context, continuation, vocabulary, task_lengths, *, span=True):
    """One row of the text as it is: the discriminator scores each continuation token by how sure it is that the
    token is original (token_logprobs)."""
    context = families.cut_left(context, task_lengths["inputs"] - len(continuation))
    tokens = np.asarray([*context, *continuation], np.int32)
    return [families.encoder_row(tokens, tokens, np.arange(len(tokens)) >= len(context))]

  def token_logprobs(self, model, params, batch):
    """log P(original) of each scored token by the discriminator, log sigmoid(-logit) (not a language model's
    likelihood: a plausibility score, which random parameters give no preference by construction); greedy
    where it calls the token original."""
    logits_BL, _ = model.apply({"params": params}, batch["encoder_input_tokens"], batch["encoder_segment_ids"],
                               batch["encoder_positions"], method="discriminate")
    scored_BL = batch["encoder_loss_weights"] > 0
    return jnp.where(scored_BL, -jnp.logaddexp(0.0, logits_BL), 0.0), ~scored_BL | (logits_BL < 0)

  def loss_sums(self, model, params, batch, loss_cfg, rng=None):
    """The generator's MLM sums plus the discriminator's over every token: ELECTRA's loss, the generator's mean
    cross-entropy plus loss.electra_discriminator_weight times the discriminator's mean binary cross-entropy
    (which enters times the masked tokens, the weight)."""
    out, moe_values = self.forward(model, params, batch, rng)
    targets_BL, weights_BL = batch["encoder_target_tokens"], batch["encoder_loss_weights"]
    sums = losses.with_moe(losses.loss_sums(out["generator_logits"], targets_BL, weights_BL, loss_cfg.z_loss,
                                            loss_cfg.label_smoothing), moe_values, loss_cfg)
    tokens_BL = (batch["encoder_segment_ids"] > 0).astype(jnp.float32)
    replaced_BL = models.electra.replaced(out["corrupted"], targets_BL, weights_BL)
    logits_BL = out["discriminator_logits"]
    bce_BL = jnp.logaddexp(0.0, logits_BL) - logits_BL * replaced_BL  # -log sigmoid(+-logit)
    said_BL = logits_BL > 0
    count = lambda x_BL: jnp.sum(x_BL * tokens_BL)
    sums.update(discriminator_loss=count(bce_BL), tokens=jnp.sum(tokens_BL), replaced=count(replaced_BL),
                said_replaced=count(said_BL), true_replaced=count(said_BL & replaced_BL),
                discriminator_correct=count(said_BL == replaced_BL))
    discriminator = loss_cfg.electra_discriminator_weight * ratio(sums["discriminator_loss"], sums["tokens"])
    sums["loss"] += discriminator * sums["weight"]
    sums["joint"] = sums["cross_entropy"] + discriminator * sums["weight"]  # what eval/loss reports
    return sums

  def train_metrics(self, sums):
    metrics = {"loss": ratio(sums["loss"], sums["weight"]), "z_loss": ratio(sums["z_loss"], sums["weight"]),
               **losses.moe_metrics(sums, ratio, per_layer=False)}
    return {**metrics, **self._metrics(sums, ratio)}

  def eval_metrics(self, totals):
    return {"loss": totals_ratio(totals["joint"], totals["weight"]), **self._metrics(totals, totals_ratio),
            **bits_per_byte(totals), **losses.moe_metrics(totals, totals_ratio, per_layer=True)}  # MLM's bits

  @staticmethod
  def _metrics(sums, ratio) -> dict:
    return {"generator_loss": ratio(sums["cross_entropy"], sums["weight"]),
            "generator_accuracy": ratio(sums["correct"], sums["weight"]),
            "discriminator_loss": ratio(sums["discriminator_loss"], sums["tokens"]),
            "discriminator_accuracy": ratio(sums["discriminator_correct"], sums["tokens"]),
            # What calling every token original scores: the baseline of the accuracy above.
            "discriminator_all_original_accuracy": ratio(sums["tokens"] - sums["replaced"], sums["tokens"]),
            "discriminator_precision": ratio(sums["true_replaced"], sums["said_replaced"]),
            "discriminator_recall": ratio(sums["true_replaced"], sums["replaced"])}


class Electra(mlm.MLM):
  name, family = "electra", ElectraFamily()
  settings = {**mlm.SETTINGS,
              "model.electra_generator_size": Setting(0.25, config.POSITIVE, "the generator's share of the "
                                                      "discriminator's heads, width and feed-forward width"),
              "loss.electra_discriminator_weight": Setting(50.0, config.POSITIVE, "the replaced-token detection "
                                                           "loss's weight (the paper's)")}
