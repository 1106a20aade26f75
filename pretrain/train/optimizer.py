"""Optax optimizers and learning-rate schedules from the `optimizer` config."""

import jax
import optax


def schedule(opt_cfg, total_steps: int) -> optax.Schedule:
  """Linear warmup to the peak learning rate, then cosine decay to `end_lr_ratio` of it."""
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=opt_cfg.learning_rate, warmup_steps=opt_cfg.warmup_steps,
      decay_steps=max(total_steps, opt_cfg.warmup_steps + 1), end_value=opt_cfg.learning_rate * opt_cfg.end_lr_ratio)


def _decay_mask(params):
  """Weight decay on matrices only, not on norm scales."""
  return jax.tree.map(lambda p: p.ndim >= 2, params)


def make(opt_cfg, total_steps: int) -> optax.GradientTransformation:
  """AdamW with global-norm gradient clipping."""
  return optax.chain(
      optax.clip_by_global_norm(opt_cfg.grad_clip),
      optax.adamw(schedule(opt_cfg, total_steps), b1=opt_cfg.b1, b2=opt_cfg.b2, eps=1e-8,
                  weight_decay=opt_cfg.weight_decay, mask=_decay_mask),
  )
