"""The compiled train and eval steps and the loss they share."""

import jax
import jax.numpy as jnp
import optax

from pretrain.models import forward
from pretrain.train.state import TrainState


def loss_sums(logits_BLV, batch):
  """Summed float32 cross-entropy, weight and correct predictions over weighted positions."""
  targets_BL = batch["decoder_target_tokens"]
  weights_BL = batch["decoder_loss_weights"].astype(jnp.float32)
  loss_BL = optax.softmax_cross_entropy_with_integer_labels(logits_BLV.astype(jnp.float32), targets_BL)
  correct_BL = (jnp.argmax(logits_BLV, axis=-1) == targets_BL).astype(jnp.float32)
  return {"loss": jnp.sum(loss_BL * weights_BL), "weight": jnp.sum(weights_BL),
          "correct": jnp.sum(correct_BL * weights_BL)}


def make_train_step(model, tx, lr_schedule):
  def train_step(state: TrainState, batch):
    def loss_fn(params):
      sums = loss_sums(forward(model, params, batch), batch)
      return sums["loss"] / jnp.maximum(sums["weight"], 1.0), sums

    grads, sums = jax.grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    weight = jnp.maximum(sums["weight"], 1.0)
    metrics = {"loss": sums["loss"] / weight, "accuracy": sums["correct"] / weight,
               "grad_norm": optax.tree.norm(grads), "learning_rate": lr_schedule(state.step)}
    return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics

  return train_step


def make_eval_step(model):
  def eval_step(params, batch):
    return loss_sums(forward(model, params, batch), batch)
  return eval_step
