"""Unsupervised SimCSE (Gao et al. 2021): two dropout views of each row, compared by cosine against every
other row of the batch.

Rows are each document cut into pieces of at most the sequence length, unmasked. The two views of a row are
drawn by the model's dropout (ContrastiveFamily), so `inputs` and `targets` are the same tokens and no token
carries a loss (`weights` 0).
"""

import math

import jax
import jax.numpy as jnp

from pretrain import config, families, models
from pretrain.families import ratio, totals_ratio
from pretrain.models import layers
from pretrain.objectives import common
from pretrain.objectives.spec import Objective, Setting
from pretrain.system import tf_loader
from pretrain.system.errors import UserError
from pretrain.train import losses

tf = tf_loader.Lazy("tensorflow")


def contrastive(dataset, sequence_length, output_features):
  del output_features
  dataset = common.split_to_length(dataset, sequence_length["inputs"])
  return dataset.map(lambda ex: {"inputs": ex["targets"], "targets": ex["targets"],
                                 "weights": tf.zeros_like(ex["targets"])}, num_parallel_calls=tf.data.AUTOTUNE)


def info_nce_sums(views: list, rows_B, temperature: float, rows_BM=None) -> dict:
  """InfoNCE sums over the rows `rows_B` of two views [B, D] (each row's other view the positive among every
  such row's), and Wang & Isola's alignment (squared distance of the two views) and uniformity (over the pairs of
  rows of the first view). `rows_BM`: each row's member of a schedule, one-hot, for each member's loss, weight
  and correct predictions ([M] arrays)."""
  z1_BD, z2_BD = (v / jnp.maximum(jnp.linalg.norm(v, axis=-1, keepdims=True), 1e-12) for v in views)
  similarity_BB = z1_BD @ z2_BD.T / temperature
  similarity_BB = jnp.where(rows_B[None, :], similarity_BB, -1e9)  # other rows are no candidates (finite: no NaN)
  positive_B = jnp.diagonal(similarity_BB)
  loss_B = jax.nn.logsumexp(similarity_BB, axis=-1) - positive_B
  valid_B = rows_B.astype(jnp.float32)
  others_BB = valid_B[:, None] * valid_B[None, :] * (1.0 - jnp.eye(len(valid_B)))
  distance_BB = jnp.maximum(2.0 - 2.0 * z1_BD @ z1_BD.T, 0.0)  # squared distance of unit vectors
  loss_B, correct_B = jnp.where(rows_B, loss_B, 0.0), (positive_B >= jnp.max(similarity_BB, axis=-1)) * valid_B
  sums = {"loss": jnp.sum(loss_B), "weight": jnp.sum(valid_B), "correct": jnp.sum(correct_B),
          "alignment": jnp.sum(jnp.sum(jnp.square(z1_BD - z2_BD), -1) * valid_B),
          "uniformity": jnp.sum(jnp.exp(-2.0 * distance_BB) * others_BB), "pairs": jnp.sum(others_BB)}
  if rows_BM is not None:
    sums.update({"member_loss": loss_B @ rows_BM, "member_weight": valid_B @ rows_BM,
                 "member_correct": correct_B @ rows_BM})
  return sums


class ContrastiveFamily(families.EncoderOnly):
  """Unsupervised SimCSE (Gao et al. 2021): two dropout views of each row, their mean final states
  (layers.mean_pool) compared by cosine / loss.contrastive_temperature, each row's other view the positive among
  every row of the global batch (in-batch negatives, gathered across data shards by the sharded matmul)."""
  name, architecture = "encoder-only contrastive", "sentence encoder"
  mixes = False
  moe = False  # InfoNCE's sums do not take the experts' terms yet.

  def joint(self, member_families):
    """With MLM rows in a schedule (data.schedule): the encoder trained on both (WithMLM)."""
    if set(member_families) == {families.ENCODER_ONLY, self}:
      return WithMLM(tuple(i for i, family in enumerate(member_families) if family is self))
    return None

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
    return models.EncoderOnly(models.DecoderOnlyConfig.from_config(*models.resolve(model_cfg, vocabulary_size)),
                              outputs="hidden")

  def representations(self, model, params, tokens_BL):
    return model.apply({"params": params}, tokens_BL)

  score_rows = families.Family.score_rows  # No token head: it scores no text.

  def flops_per_example(self, params, model_cfg, task_lengths):
    return 2 * super().flops_per_example(params, model_cfg, task_lengths)  # Two views, each forward and back.

  def hidden(self, model, params, batch, rng):
    """The final states [B, L, D] of one dropout view."""
    return self.forward(model, params, batch, rng)[0]

  def loss_sums(self, model, params, batch, loss_cfg, rng=None):
    rows_B = jnp.any(batch["encoder_segment_ids"] > 0, axis=-1)
    return info_nce_sums(self._views(model, params, batch, rng), rows_B, loss_cfg.contrastive_temperature)

  def _views(self, model, params, batch, rng) -> list:
    """The two views' mean final states; evaluation draws them with a fixed key."""
    rng = jax.random.key(0) if rng is None else rng
    return [layers.mean_pool(self.hidden(model, params, batch, key), batch["encoder_segment_ids"])
            for key in jax.random.split(rng)]

  def train_metrics(self, sums):
    return {"loss": ratio(sums["loss"], sums["weight"]), **self._metrics(sums, ratio, jnp.log)}

  def eval_metrics(self, totals):
    return {"loss": totals_ratio(totals["loss"], totals["weight"]),
            **self._metrics(totals, totals_ratio, lambda x: math.log(max(x, 1e-30)))}

  @staticmethod
  def _metrics(sums, ratio, log) -> dict:
    return {"accuracy": ratio(sums["correct"], sums["weight"]), "alignment": ratio(sums["alignment"], sums["weight"]),
            "uniformity": log(ratio(sums["uniformity"], sums["pairs"]))}


class WithMLM(ContrastiveFamily):
  """MLM and SimCSE on one encoder: a data.schedule of mlm and contrastive members (SimCSE continues an
  MLM-trained encoder in its paper; from scratch its task is solved at once). The model is MLM's, with its
  output layer, and both dropout views of each batch run through it: its MLM rows give the token loss (of the
  first view), its contrastive rows (whose tokens carry no loss) InfoNCE among themselves; the step optimises
  the sum of the two means, as BERT's MLM and NSP. Its batches name each row's member (batch['member']), in
  training and evaluation."""
  name, architecture = "encoder-only MLM and contrastive", families.ENCODER_ONLY.architecture
  mixes, rows_named = True, True

  def __init__(self, contrastive_members: tuple[int, ...]):
    self.contrastive_members = contrastive_members
    self.joined = (families.ENCODER_ONLY, Contrastive.family)

  def build(self, model_cfg, vocabulary_size):
    return models.EncoderOnly(models.DecoderOnlyConfig.from_config(*models.resolve(model_cfg, vocabulary_size)),
                              outputs="both")

  def hidden(self, model, params, batch, rng):
    return self.forward(model, params, batch, rng)[0][1]

  def representations(self, model, params, tokens_BL):
    return model.apply({"params": params}, tokens_BL)[1]

  def loss_sums(self, model, params, batch, loss_cfg, rng=None, members=0):
    """MLM's token sums (each member's too, with `members`), and InfoNCE's as contrastive_*: its mean enters the
    loss times the masked tokens (the weight), as SentencePairs' pair loss. Evaluation reads the tokens'
    logits without dropout."""
    num_members = max(members, max(self.contrastive_members) + 1)
    rows_BM = jax.nn.one_hot(batch["member"][:, 0], num_members, dtype=jnp.float32)
    outputs = [self.forward(model, params, batch, key)[0]
               for key in jax.random.split(jax.random.key(0) if rng is None else rng)]
    views = [layers.mean_pool(hidden_BLD, batch["encoder_segment_ids"]) for _, hidden_BLD in outputs]
    logits_BLV = outputs[0][0] if rng is not None else self.forward(model, params, batch)[0][0]
    targets_BL, weights_BL = self.targets_and_weights(batch)
    sums = losses.loss_sums(logits_BLV, targets_BL, weights_BL, loss_cfg.z_loss, loss_cfg.label_smoothing,
                            batch["member"] if members else None, members)
    contrastive_B = jnp.any(batch["encoder_segment_ids"] > 0, axis=-1) & jnp.isin(
        batch["member"][:, 0], jnp.asarray(self.contrastive_members))
    info_nce = info_nce_sums(views, contrastive_B, loss_cfg.contrastive_temperature, rows_BM if members else None)
    if members:  # The contrastive members' parts are their InfoNCE (they have no token loss).
      for key in ("loss", "weight", "correct"):
        sums[f"member_{'cross_entropy' if key == 'loss' else key}"] += info_nce.pop(f"member_{key}")
    sums.update({f"contrastive_{k}": v for k, v in info_nce.items()})
    sums["loss"] += ratio(info_nce["loss"], info_nce["weight"]) * jnp.maximum(sums["weight"], 1.0)
    return sums

  def train_metrics(self, sums):
    return {**families.Family.train_metrics(self, sums), **self._contrastive(sums, ratio, jnp.log)}

  def eval_metrics(self, totals):
    """MLM's metrics where the batches held MLM rows, the contrastive ones where they held contrastive rows (an
    evaluation task holds one kind); the loss is the sum of the two."""
    metrics = families.Family.eval_metrics(self, totals) if totals["weight"] else {}
    if totals["contrastive_weight"]:
      contrastive = self._contrastive(totals, totals_ratio, lambda x: math.log(max(x, 1e-30)))
      metrics = {"accuracy": contrastive["contrastive_accuracy"], **metrics, **contrastive,
                 "loss": metrics.get("loss", 0.0) + contrastive["contrastive_loss"]}
    return metrics

  @classmethod
  def _contrastive(cls, sums, ratio, log) -> dict:
    metrics = {"loss": ratio(sums["contrastive_loss"], sums["contrastive_weight"]),
               **cls._metrics({k.removeprefix("contrastive_"): v for k, v in sums.items()
                               if k.startswith("contrastive_")}, ratio, log)}
    return {f"contrastive_{k}" if k in ("loss", "accuracy") else k: v for k, v in metrics.items()}


class Contrastive(Objective):
  name, family = "contrastive", ContrastiveFamily()
  settings = {"loss.contrastive_temperature": Setting(0.05, config.POSITIVE, "cosine similarities are divided by "
                                                                             "this (SimCSE's)")}

  def preprocess(self, dataset, sequence_length, output_features):
    return contrastive(dataset, sequence_length, output_features)
