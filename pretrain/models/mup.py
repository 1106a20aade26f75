"""The maximal-update parameterization (muP; Yang et al. 2022, Tensor Programs V, Table 3 for Adam).

Under model.parameterization=mup a model of width d_model = m x model.mup_base_width differs from the standard
one (the same model at the base width, m = 1, exactly) in three places, all derived from the parameters'
logical axis names, so that every family, with or without experts, scanned or not, follows the same rule:

- a matrix whose inputs and outputs both grow with the width ("hidden": attention, feed-forward, experts)
  learns at base/width times the learning rate;
- a matrix whose inputs grow but whose outputs do not ("output": the language-model head, the router, a
  sentence head) starts at base/width times its standard initialisation and learns at base/width times the rate:
  with Adam, the same as multiplying its logits by base/width (muP's output multiplier), but nothing changes
  in the forward pass, so an export needs no folding;
- vectors (norm scales, biases) and input layers (embeddings, T5's relative-position table) keep both.

Attention logits are scaled 1/d_head rather than 1/sqrt(d_head): the queries are multiplied by
sqrt(model.mup_base_head_dim / model.head_dim), 1 when the width grows by heads (head_dim fixed, the default),
a factor that also applies to T5, whose 1/sqrt(d_kv) is folded into its query initialisation.

The width multiplier is one number, d_model / mup_base_width: the other widths (model.mlp_dim,
num_heads x head_dim, moe_mlp_dim) are taken to grow with d_model, as the zoo's do. Tied embeddings and Adafactor
are refused with the config (pretrain/config/rules.py): one table cannot be muP's input layer and its output layer
at once.
"""

import jax
import flax.linen as nn

WIDTH_AXES = frozenset({"embed", "mlp", "heads", "kv", "kv_heads"})  # grow with the model's width
BATCH_AXES = frozenset({"layers", "exp"})  # kernels side by side: scanned layers, stacked experts


def split_axes(names) -> tuple:
  """(batch, input, output) axis indices of a parameter from its logical axis names: the input axes are those a
  projection contracts (models/layers.project): the leading 'vocab' or 'embed' axis, else all but a last 'embed'."""
  batch = tuple(i for i, n in enumerate(names) if n in BATCH_AXES)
  rest = [i for i, n in enumerate(names) if n not in BATCH_AXES]
  if len(rest) < 2:
    return batch, tuple(rest), ()
  if names[rest[-1]] == "embed" and names[rest[0]] not in ("vocab", "embed"):
    return batch, tuple(rest[:-1]), (rest[-1],)
  return batch, (rest[0],), tuple(rest[1:])


def role(names) -> str:
  """vector | input | hidden | output, by whether the input and output axes grow with the width."""
  _, inputs, outputs = split_axes(names)
  if not outputs:
    return "vector"
  if not any(names[i] in WIDTH_AXES for i in inputs):
    return "input"
  return "hidden" if any(names[i] in WIDTH_AXES for i in outputs) else "output"


def _is_box(x) -> bool:
  return isinstance(x, nn.meta.AxisMetadata)


def axis_names(boxed_params):
  """The logical axis names of every parameter (a tuple of Nones where a parameter has none), unboxed tree."""
  return jax.tree.map(lambda p: tuple(p.names) if isinstance(p, nn.LogicallyPartitioned) else (None,) * p.ndim,
                      boxed_params, is_leaf=_is_box)


def is_names(x) -> bool:
  return isinstance(x, tuple)


def roles(names_tree):
  """The role of every parameter, from axis_names()."""
  return jax.tree.map(role, names_tree, is_leaf=is_names)


def width_ratio(model_cfg) -> float:
  """m = d_model / model.mup_base_width under muP; 1 under the standard parameterization."""
  if model_cfg.get("parameterization", "standard") != "mup":
    return 1.0
  return model_cfg.d_model / model_cfg.mup_base_width


def query_scale(model_cfg) -> float:
  """The queries' multiplier: sqrt(base head_dim / head_dim) under muP (1/d_head logits), else 1."""
  if model_cfg.get("parameterization", "standard") != "mup":
    return 1.0
  return ((model_cfg.mup_base_head_dim or model_cfg.head_dim) / model_cfg.head_dim) ** 0.5


def init_scales(role_tree, ratio: float):
  """Multipliers of the standard initialisation: base/width for output matrices."""
  return jax.tree.map(lambda r: 1.0 / ratio if r == "output" else 1.0, role_tree)


def lr_scales(role_tree, ratio: float):
  """Multipliers of each parameter's update (learning rate and weight decay): base/width for hidden and
  output matrices."""
  return jax.tree.map(lambda r: 1.0 / ratio if r in ("hidden", "output") else 1.0, role_tree)
