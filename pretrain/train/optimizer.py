"""Optax optimizers and learning-rate schedules from the `optimizer` config.

AdamW with warmup and cosine decay (the default), or T5's Adafactor with its
inverse-square-root schedule; both clip the global gradient norm first.
"""

import jax
import optax

from pretrain.system.errors import UserError

NAMES = ("adamw", "adafactor")
SCHEDULES = ("cosine", "rsqrt")


def schedule(opt_cfg, total_steps: int) -> optax.Schedule:
  """cosine: linear warmup to `learning_rate`, then cosine decay to `end_lr_ratio` of it.
  rsqrt (T5): `learning_rate` for `warmup_steps`, then decaying as 1/sqrt(step)
  (T5's 1/sqrt(max(step, 10^4)) is learning_rate=0.01, warmup_steps=10000)."""
  kind = opt_cfg.schedule
  if kind == "rsqrt":
    warmup = max(opt_cfg.warmup_steps, 1)
    return lambda step: opt_cfg.learning_rate * jax.lax.rsqrt(jax.numpy.maximum(step, warmup) / warmup)
  if kind != "cosine":
    raise UserError(f"optimizer.schedule={kind!r} is unknown; use one of {', '.join(SCHEDULES)}")
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=opt_cfg.learning_rate, warmup_steps=opt_cfg.warmup_steps,
      decay_steps=max(total_steps, opt_cfg.warmup_steps + 1), end_value=opt_cfg.learning_rate * opt_cfg.end_lr_ratio)


def decay_mask(params):
  """Weight decay on weight matrices and embeddings, not on norm scales (which
  are matrices too when layers are scanned)."""
  return jax.tree_util.tree_map_with_path(
      lambda path, p: p.ndim >= 2 and getattr(path[-1], "key", None) != "scale", params)


def make(opt_cfg, total_steps: int) -> optax.GradientTransformation:
  name = opt_cfg.name
  lr = schedule(opt_cfg, total_steps)
  if name == "adamw":
    update = optax.adamw(lr, b1=opt_cfg.b1, b2=opt_cfg.b2, eps=opt_cfg.eps, weight_decay=opt_cfg.weight_decay,
                         mask=decay_mask)
  elif name == "adafactor":
    # T5's settings: factored second moments, decay 0.8, update clipping at 1, no momentum,
    # steps scaled by the parameter's root-mean-square.
    update = optax.adafactor(lr, decay_rate=0.8, clipping_threshold=1.0, multiply_by_parameter_scale=True,
                             weight_decay_rate=opt_cfg.weight_decay or None, weight_decay_mask=decay_mask)
  else:
    raise UserError(f"optimizer.name={name!r} is unknown; use one of {', '.join(NAMES)}")
  return optax.chain(optax.clip_by_global_norm(opt_cfg.grad_clip), update)
