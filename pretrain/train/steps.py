"""The compiled train and eval steps."""

import jax
import jax.numpy as jnp
import optax

from pretrain.models import forward, targets_and_weights
from pretrain.train import losses
from pretrain.train.state import TrainState


def _sums(model, params, batch, loss_cfg=None):
  logits_BLV = forward(model, params, batch)
  targets_BL, weights_BL = targets_and_weights(batch)
  if loss_cfg is None:  # Evaluation: the plain cross-entropy.
    return losses.loss_sums(logits_BLV, targets_BL, weights_BL)
  return losses.loss_sums(logits_BLV, targets_BL, weights_BL, loss_cfg.z_loss, loss_cfg.label_smoothing)


def make_train_step(model, tx, lr_schedule, loss_cfg):
  """The loss is summed over target tokens and divided by their number, or by
  `loss.normalizing_factor` when that is set (T5X's loss_normalizing_factor)."""

  def train_step(state: TrainState, batch):
    def loss_fn(params):
      sums = _sums(model, params, batch, loss_cfg)
      denominator = loss_cfg.normalizing_factor or jnp.maximum(sums["weight"], 1.0)
      return sums["loss"] / denominator, sums

    grads, sums = jax.grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    weight = jnp.maximum(sums["weight"], 1.0)
    metrics = {"loss": sums["loss"] / weight, "cross_entropy": sums["cross_entropy"] / weight,
               "z_loss": sums["z_loss"] / weight, "accuracy": sums["correct"] / weight,
               "grad_norm": optax.tree.norm(grads), "learning_rate": lr_schedule(state.step)}
    return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics

  return train_step


def make_eval_step(model):
  def eval_step(params, batch):
    sums = _sums(model, params, batch)
    return {"loss": sums["cross_entropy"], "weight": sums["weight"], "correct": sums["correct"]}
  return eval_step
