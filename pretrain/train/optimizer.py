"""Optax optimizers and learning-rate schedules from the `optimizer` config.

AdamW with warmup and cosine decay (the default) or warmup-stable-decay, T5's
Adafactor with its inverse-square-root schedule, or Muon (optax.contrib) on the hidden matrices
with AdamW on the rest; all clip the global gradient norm first (unless
optimizer.grad_clip=0). Under muP, each parameter's update is then
multiplied by its muP factor (models/mup.py).
"""

import jax
import jax.numpy as jnp
import optax
from optax.contrib import _muon as optax_muon  # its orthogonalisation and shape scaling (optax pinned below 0.3)

from pretrain import config as config_lib
from pretrain.models import mup
from pretrain.system.errors import UserError

NAMES = ("adamw", "adafactor", "muon")
MUON_STEPS = 5  # Newton-Schulz iterations, optax's and the reference code's
MUON_RMS = 0.2  # Muon's update RMS, matched to AdamW's (Moonshot, "Muon is scalable"): one learning rate for both
SCHEDULES = ("cosine", "rsqrt", "wsd")
# wsd's decays: the share f(tau) of the way from the peak to the end done at tau, the share of the decay's steps done.
DECAY_SHAPES = {"1-sqrt": jnp.sqrt, "linear": lambda tau: tau, "cosine": lambda tau: (1 - jnp.cos(jnp.pi * tau)) / 2}


def decay(shape: str, peak: float, end: float, steps: int) -> optax.Schedule:
  """peak - (peak - end) f(t / steps), `end` from `steps` on: 1-sqrt (Hägele et al. 2024; peak (1 - sqrt(tau)) when
  end is 0), linear or cosine. Written out rather than optax's (init - end) (1 - tau) + end so that it starts at
  exactly the peak: a cooldown branch's first update is its parent's, bit for bit."""
  if shape not in DECAY_SHAPES:
    raise UserError(f"optimizer.decay_shape={shape!r} is unknown; use one of {', '.join(DECAY_SHAPES)}")
  done = DECAY_SHAPES[shape]
  return lambda t: peak - (peak - end) * done(jnp.clip(t / steps, 0.0, 1.0))


def wsd(opt_cfg, total_steps: int) -> optax.Schedule:
  """Warmup-stable-decay (MiniCPM, Hägele et al. 2024): linear warm-up from 0 to `learning_rate` over
  `warmup_steps`, constant until the decay's last D steps (config.wsd_decay_steps), then `decay_shape` down to
  `end_lr_ratio` of it, reached at step `total_steps`. The rate of steps up to the decay's start does not depend on
  the run's length, so a longer run's checkpoint of its stable phase is where a shorter one decays from."""
  peak, steps = opt_cfg.learning_rate, config_lib.wsd_decay_steps(opt_cfg, total_steps)
  phases = [optax.linear_schedule(0.0, peak, opt_cfg.warmup_steps)] if opt_cfg.warmup_steps else []
  phases += [optax.constant_schedule(peak), decay(opt_cfg.decay_shape, peak, peak * opt_cfg.end_lr_ratio, steps)]
  boundaries = [opt_cfg.warmup_steps] if opt_cfg.warmup_steps else []
  return optax.join_schedules(phases, boundaries + [total_steps - steps])


def schedule(opt_cfg, total_steps: int) -> optax.Schedule:
  """cosine: linear warmup to `learning_rate`, then cosine decay to `end_lr_ratio` of it.
  rsqrt (T5): `learning_rate` for `warmup_steps`, then decaying as 1/sqrt(step)
  (T5's 1/sqrt(max(step, 10^4)) is learning_rate=0.01, warmup_steps=10000).
  wsd: warm-up, a constant stable phase, then a decay over the last steps (wsd())."""
  kind = opt_cfg.schedule
  if kind == "wsd":
    return wsd(opt_cfg, total_steps)
  if kind == "rsqrt":
    warmup = max(opt_cfg.warmup_steps, 1)
    return lambda step: opt_cfg.learning_rate * jax.lax.rsqrt(jax.numpy.maximum(step, warmup) / warmup)
  if kind != "cosine":
    raise UserError(f"optimizer.schedule={kind!r} is unknown; use one of {', '.join(SCHEDULES)}")
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=opt_cfg.learning_rate, warmup_steps=opt_cfg.warmup_steps,
      decay_steps=max(total_steps, opt_cfg.warmup_steps + 1), end_value=opt_cfg.learning_rate * opt_cfg.end_lr_ratio)


def warmup_note(opt_cfg, total_steps: int) -> str | None:
  """A line for a run that ends before its cosine warm-up does (it never reaches optimizer.learning_rate), else
  None."""
  if opt_cfg.schedule != "cosine" or opt_cfg.warmup_steps < total_steps:
    return None
  reached = float(schedule(opt_cfg, total_steps)(total_steps - 1)) / opt_cfg.learning_rate
  return (f"Note: optimizer.warmup_steps={opt_cfg.warmup_steps} is not shorter than train.steps={total_steps}: the "
          f"learning rate rises to {reached:.2f} of optimizer.learning_rate={opt_cfg.learning_rate:g} at the last "
          f"step and never decays; for a short run lower the warm-up, e.g. "
          f"--config.optimizer.warmup_steps={max(1, total_steps // 10)}")


def decay_mask(params):
  """Weight decay on weight matrices and embeddings, not on norm scales (which
  are matrices too when layers are scanned)."""
  return jax.tree_util.tree_map_with_path(
      lambda path, p: p.ndim >= 2 and getattr(path[-1], "key", None) != "scale", params)


def muon_dimensions(axes_tree):
  """optax.contrib.muon's dimension numbers of each hidden matrix (models/mup.py: its input axes reduce, its
  output axes are kept, the scanned layers' and stacked experts' axes are batch axes: each layer and expert is
  orthogonalised on its own); None (AdamW) for the rest."""
  def dims(names):
    if mup.role(names) != "hidden":
      return None
    _, inputs, outputs = mup.split_axes(names)
    return optax.contrib.MuonDimensionNumbers(reduction_axis=inputs, output_axis=outputs)
  return jax.tree.map(dims, axes_tree, is_leaf=mup.is_names)


def _is_dims(x) -> bool:
  return x is None or isinstance(x, optax.contrib.MuonDimensionNumbers)


def newton_schulz_in(dtype, beta, dims) -> optax.GradientTransformation:
  """optax.contrib.scale_by_muon with its Newton-Schulz iterations in `dtype` (bfloat16, as Jordan's and Moonshot's
  reference code run them): optax's Nesterov momentum (kept in float32) scaled to a unit Frobenius norm (its
  iterations set to 0), then the 5 iterations on the matrix cast to `dtype`, the result cast back."""
  momentum = optax.contrib.scale_by_muon(beta=beta, ns_steps=0, weight_dimension_numbers=dims)

  def update(updates, state, params=None):
    unit, state = momentum.update(updates, state, params)
    orthogonalize = lambda x, d: optax_muon.orthogonalize_via_newton_schulz(
        x.astype(dtype), state.ns_coeffs.astype(dtype), MUON_STEPS, dimension_numbers=d).astype(x.dtype)
    return jax.tree.map(orthogonalize, unit, dims(unit)), state

  return optax.GradientTransformation(momentum.init, update)


def muon(opt_cfg, lr, axes_tree) -> optax.GradientTransformation:
  """Muon on the hidden matrices: Nesterov momentum, then 5 Newton-Schulz steps towards the nearest
  semi-orthogonal matrix, multiplied by 0.2 sqrt(max(fan_in, fan_out)) so that its RMS is AdamW's (Moonshot's
  scaling, rather than Jordan's sqrt(max(1, fan_out / fan_in))), and decoupled weight decay; AdamW, with its
  decay mask, on embeddings, norms, biases and output matrices. Both take `lr`, AdamW's learning rate."""
  dims = muon_dimensions(axes_tree)
  labels = jax.tree.map(lambda d: "adamw" if d is None else "muon", dims, is_leaf=_is_dims)
  if opt_cfg.muon_dtype == "float32":
    hidden = optax.contrib.muon(lr, beta=opt_cfg.muon_momentum, weight_decay=opt_cfg.weight_decay,
                                muon_weight_dimension_numbers=dims, consistent_rms=MUON_RMS)
  else:  # optax.contrib.muon's transforms, the iterations in another dtype (its own has no dtype to set).
    masked_dims = lambda updates: jax.tree.map(lambda d, u: optax.MaskedNode() if d is None else d, dims, updates,
                                               is_leaf=_is_dims)
    hidden = optax.chain(newton_schulz_in(jnp.dtype(opt_cfg.muon_dtype), opt_cfg.muon_momentum, masked_dims),
                         optax_muon.scale_by_shape(masked_dims, consistent_rms=MUON_RMS),
                         optax.add_decayed_weights(opt_cfg.weight_decay), optax.scale_by_learning_rate(lr))
    # optax's muon partitions again, its AdamW branch empty here; so does this one, so that both dtypes keep one
    # optimizer state and a run resumes under either (runs saved before muon_dtype, resumed by their command).
    everything_muon = lambda updates: jax.tree.map(lambda _: "muon", updates)
    hidden = optax.partition({"muon": hidden, "adam": optax.adamw(lr)}, everything_muon)
  rest = optax.adamw(lr, b1=opt_cfg.b1, b2=opt_cfg.b2, eps=opt_cfg.eps, weight_decay=opt_cfg.weight_decay,
                     mask=decay_mask)
  return optax.partition({"muon": hidden, "adamw": rest}, labels)


def decoupled_weight_decay(rate: float, lr) -> optax.GradientTransformation:
  """AdamW's decoupled weight decay for another optimizer: -lr(step) x rate x the parameter added to its update,
  on the parameters of decay_mask."""
  def init(params):
    del params
    return optax.ScaleByScheduleState(count=jnp.zeros([], jnp.int32))

  def update(updates, state, params):
    factor = lr(state.count) * rate
    updates = jax.tree.map(lambda u, p, decayed: u - factor * p if decayed else u, updates, params, decay_mask(params))
    return updates, optax.ScaleByScheduleState(count=optax.safe_increment(state.count))

  return optax.GradientTransformation(init, update)


def adafactor(lr, axes_tree=None) -> optax.GradientTransformation:
  """optax.adafactor with T5's settings (factored second moments, decay 0.8, update clipping at 1, no momentum,
  steps scaled by the parameter's root-mean-square), the clipping and the parameter's scale measured per weight
  matrix: each scanned layer's or stacked expert's on its own (their batch axes, models/mup.py), as T5X's
  Adafactor treats a 'layers' axis, where optax's measures a whole stack. The state is optax's."""
  batch_axes = None if axes_tree is None else jax.tree.map(lambda names: mup.split_axes(names)[0], axes_tree,
                                                          is_leaf=mup.is_names)

  def per_matrix(scale):
    """A stateless transform: each update times scale(update, parameter, the parameter's root-mean-square)."""
    def update(updates, state, params=None):
      axes = batch_axes if batch_axes is not None else jax.tree.map(lambda _: (), updates)
      rms = lambda x, batch: jnp.sqrt(jnp.mean(jnp.square(x), axis=tuple(
          i for i in range(x.ndim) if i not in batch), keepdims=True))
      return jax.tree.map(lambda u, p, batch: scale(u, rms, batch, p), updates,
                          params if params is not None else updates, axes), state
    return optax.GradientTransformation(optax.init_empty_state, update)

  return optax.chain(
      optax.scale_by_factored_rms(decay_rate=0.8),
      per_matrix(lambda u, rms, batch, p: u / jnp.maximum(1.0, rms(u, batch) / 1.0)),  # Clipping at 1.
      optax.scale_by_learning_rate(lr, flip_sign=False),
      per_matrix(lambda u, rms, batch, p: u * jnp.maximum(rms(p, batch), 1e-3)),  # The parameter's scale.
      optax.scale(-1))


def make(opt_cfg, total_steps: int, axes_tree=None, lr_scales=None) -> optax.GradientTransformation:
  """The optimizer; `axes_tree`: every parameter's logical axis names (Muon needs them), `lr_scales`: a factor
  per parameter that multiplies its update (muP), or None."""
  name = opt_cfg.name
  lr = schedule(opt_cfg, total_steps)
  if name == "adamw":
    update = optax.adamw(lr, b1=opt_cfg.b1, b2=opt_cfg.b2, eps=opt_cfg.eps, weight_decay=opt_cfg.weight_decay,
                         mask=decay_mask)
  elif name == "muon":
    update = muon(opt_cfg, lr, axes_tree)
  elif name == "adafactor":
    update = adafactor(lr, axes_tree)
    if opt_cfg.weight_decay:  # Not optax's own, which comes after the learning rate: 0.1 took a tenth a step.
      update = optax.chain(update, decoupled_weight_decay(opt_cfg.weight_decay, lr))
  else:
    raise UserError(f"optimizer.name={name!r} is unknown; use one of {', '.join(NAMES)}")
  chain = [optax.clip_by_global_norm(opt_cfg.grad_clip)] if opt_cfg.grad_clip else []  # 0: no clipping
  chain.append(update)
  if lr_scales is not None:
    chain.append(optax.stateless(lambda updates, params: jax.tree.map(lambda u, s: u * s, updates, lr_scales)))
  return optax.chain(*chain)
