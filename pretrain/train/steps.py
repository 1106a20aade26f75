"""The compiled train and eval steps."""

import jax
import jax.numpy as jnp
import optax

from pretrain.models import forward, targets_and_weights
from pretrain.train import losses
from pretrain.train.state import TrainState


def _sums(model, params, batch, loss_cfg=None, dropout_rng=None):
  logits_BLV = forward(model, params, batch, dropout_rng)
  targets_BL, weights_BL = targets_and_weights(batch)
  if loss_cfg is None:  # Evaluation: the plain cross-entropy.
    return losses.loss_sums(logits_BLV, targets_BL, weights_BL)
  return losses.loss_sums(logits_BLV, targets_BL, weights_BL, loss_cfg.z_loss, loss_cfg.label_smoothing)


def make_train_step(model, tx, lr_schedule, loss_cfg, seed: int = 0):
  """The loss is summed over target tokens and divided by their number, or by
  `loss.normalizing_factor` when that is set (T5X's loss_normalizing_factor).
  Dropout masks derive from `seed` and the step, so a resumed run draws the same ones."""

  def train_step(state: TrainState, batch):
    dropout_rng = jax.random.fold_in(jax.random.key(seed), state.step)

    def loss_fn(params):
      sums = _sums(model, params, batch, loss_cfg, dropout_rng)
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
