"""Unsupervised SimCSE (Gao et al. 2021): two dropout views of each row, compared by cosine against every
other row of the batch.

Rows are each document cut into pieces of at most the sequence length, unmasked. The two views of a row are
drawn by the model's dropout (ContrastiveFamily), so `inputs` and `targets` are the same tokens and no token
carries a loss (`weights` 0).
"""

import math

import jax
import jax.numpy as jnp

from pretrain import config, family as families, models, tf_loader
from pretrain.errors import UserError
from pretrain.family import ratio, totals_ratio
from pretrain.models import layers
from pretrain.objectives import common
from pretrain.objectives.spec import Objective, Setting

tf = tf_loader.Lazy("tensorflow")


def contrastive(dataset, sequence_length, output_features):
  del output_features
  dataset = common.split_to_length(dataset, sequence_length["inputs"])
  return dataset.map(lambda ex: {"inputs": ex["targets"], "targets": ex["targets"],
                                 "weights": tf.zeros_like(ex["targets"])}, num_parallel_calls=tf.data.AUTOTUNE)


class ContrastiveFamily(families.EncoderOnly):
  """Unsupervised SimCSE (Gao et al. 2021): two dropout views of each row, their mean final states
  (layers.mean_pool) compared by cosine / loss.contrastive_temperature, each row's other view the positive among
  every row of the global batch (in-batch negatives, gathered across data shards by the sharded matmul)."""
  name, architecture = "encoder-only contrastive", "sentence encoder"
  mixes = False

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
    return {"loss": ratio(sums["loss"], sums["weight"]), **self._metrics(sums, ratio, jnp.log)}

  def eval_metrics(self, totals):
    return {"loss": totals_ratio(totals["loss"], totals["weight"]),
            **self._metrics(totals, totals_ratio, lambda x: math.log(max(x, 1e-30)))}

  @staticmethod
  def _metrics(sums, ratio, log) -> dict:
    return {"accuracy": ratio(sums["correct"], sums["weight"]), "alignment": ratio(sums["alignment"], sums["weight"]),
            "uniformity": log(ratio(sums["uniformity"], sums["pairs"]))}


class Contrastive(Objective):
  name, family = "contrastive", ContrastiveFamily()
  settings = {"loss.contrastive_temperature": Setting(0.05, config.POSITIVE, "cosine similarities are divided by "
                                                                             "this (SimCSE's)")}

  def preprocess(self, dataset, sequence_length, output_features):
    return contrastive(dataset, sequence_length, output_features)
