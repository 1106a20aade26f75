"""Cross-entropy in float32 with z-loss and label smoothing, as in T5X.

Per position: logsumexp(z) - sum(q * z) - H(q) + z_loss * logsumexp(z)^2, where
q is the one-hot target smoothed to 1 - eps on the target and eps / (V - 1)
elsewhere, and H(q) its entropy, so a perfect prediction costs 0.
"""

import jax
import jax.numpy as jnp


def loss_sums(logits_BLV, targets_BL, weights_BL, z_loss: float = 0.0, label_smoothing: float = 0.0,
              members_BL=None, num_members: int = 0):
  """Sums over the weighted positions: the loss optimised, the plain
  cross-entropy, the z-loss term, the weight and the correct predictions.
  With `members_BL` (the member of a schedule each position's row comes from, pretrain/data/schedule.py), also
  each member's cross-entropy, weight and correct predictions: [num_members] arrays."""
  logits_BLV = logits_BLV.astype(jnp.float32)
  weights_BL = weights_BL.astype(jnp.float32)
  vocab = logits_BLV.shape[-1]
  log_z_BL = jax.nn.logsumexp(logits_BLV, axis=-1)
  target_logit_BL = jnp.take_along_axis(logits_BLV, targets_BL[..., None], axis=-1)[..., 0]
  cross_entropy_BL = log_z_BL - target_logit_BL
  loss_BL = cross_entropy_BL
  if label_smoothing:
    on, off = 1.0 - label_smoothing, label_smoothing / (vocab - 1)
    entropy = -(on * jnp.log(on) + (vocab - 1) * off * jnp.log(off + 1e-20))
    mean_logit_BL = (jnp.sum(logits_BLV, axis=-1) - target_logit_BL) / (vocab - 1)
    loss_BL = log_z_BL - on * target_logit_BL - (1.0 - on) * mean_logit_BL - entropy
  z_loss_BL = z_loss * jnp.square(log_z_BL)
  # Correct where the target's logit is the largest (a tie counts): an argmax's index pass over the logits
  # cost 5% of a step at vocabulary 32000, this reuses the maximum logsumexp takes.
  correct_BL = (target_logit_BL >= jnp.max(logits_BLV, axis=-1)).astype(jnp.float32)
  weighted = lambda x_BL: jnp.sum(x_BL * weights_BL)
  sums = {"loss": weighted(loss_BL + z_loss_BL), "cross_entropy": weighted(cross_entropy_BL),
          "z_loss": weighted(z_loss_BL), "weight": jnp.sum(weights_BL), "correct": weighted(correct_BL)}
  if members_BL is not None:
    by_member_BLM = jax.nn.one_hot(members_BL, num_members, dtype=jnp.float32) * weights_BL[..., None]
    sums.update({"member_cross_entropy": jnp.einsum("bl,blm->m", cross_entropy_BL, by_member_BLM),
                 "member_weight": jnp.sum(by_member_BLM, axis=(0, 1)),
                 "member_correct": jnp.einsum("bl,blm->m", correct_BL, by_member_BLM)})
  return sums


def with_moe(sums: dict, moe_values: dict, loss_cfg) -> dict:
  """`sums` with the mixture-of-experts layers' terms (`moe_values`: models.moe.collected): the load-balancing
  and router z losses, their means over the layers times loss.moe_load_balance and loss.moe_z_loss, enter the
  optimised loss times the weight (the train step divides by it: a mean per batch, as the token loss); kept apart
  times the weight, for their metrics, are each mean (moe_load_balance, moe_z_loss, moe_dropped) and each layer's
  share of assignments per expert (moe_load [layers, E]). The cross-entropy, and so perplexity and bits per byte,
  hold none of them."""
  if not moe_values:
    return sums
  weight = sums["weight"]
  terms = {f"moe_{name}": jnp.mean(moe_values[name]) * weight for name in ("load_balance", "z_loss", "dropped")}
  sums = {**sums, **terms, "moe_load": moe_values["load"] * weight}
  sums["loss"] = sums["loss"] + (loss_cfg.moe_load_balance * terms["moe_load_balance"]
                                 + loss_cfg.moe_z_loss * terms["moe_z_loss"])
  return sums


def moe_metrics(sums: dict, ratio, per_layer: bool) -> dict:
  """The MoE metrics of sums (traced, in training) or totals (evaluation): the mean load-balancing and z losses
  and the share of assignments dropped; `per_layer`: also each MoE layer's share of assignments per expert
  (moe_load/layer_{i}/expert_{e}, 1 / experts when balanced)."""
  if "moe_load" not in sums:
    return {}
  metrics = {name: ratio(sums[name], sums["weight"]) for name in ("moe_load_balance", "moe_z_loss", "moe_dropped")}
  if per_layer:
    for i, load_E in enumerate(sums["moe_load"]):
      metrics.update({f"moe_load/layer_{i}/expert_{e}": ratio(share, sums["weight"]) for e, share in enumerate(load_E)})
  return metrics
