"""A compute budget as training steps, and a wsd run that reaches several budgets by cooldown branches.

A step's FLOPs are the model FLOPs `pretrain bench` counts (pretrain/train/flops.py): 6 per parameter per token it
multiplies (all but the input embedding) plus the attention's 12 x layers x heads x head_dim per query-key pair,
full, not causally halved. A budget of C FLOPs is round(C / step FLOPs) steps, which reach C within half a step;
the last `cooldown` share of them decays (pretrain cooldown). One wsd run per model trains to the largest budget,
its own decay that budget's; the smaller budgets branch from its stable phase, each at S = its steps - D and
decaying over D: a budget costs D steps more, not S + D.
"""

import dataclasses

import jax

from pretrain.system.errors import UserError
from pretrain.train import flops


@dataclasses.dataclass(frozen=True)
class Model:
  """What a config's model costs: FLOPs and tokens per step, and its N (parameters a token multiplies)."""
  step_flops: float
  tokens_per_step: int
  n: float
  non_embedding: int
  params: int


def model(run) -> Model:
  """The Model of a pretrain.run.Run (its abstract parameters: nothing is allocated)."""
  shapes = run.abstract_state().params
  size = lambda tree: sum(x.size for x in jax.tree.leaves(tree))
  rows = run.cfg.train.batch_size
  return Model(step_flops=run.flops_per_example(shapes) * rows,
               tokens_per_step=rows * sum(run.family.row_lengths(run.task_lengths).values()),
               n=flops.multiplying_parameters(shapes, run.cfg.model),
               # Kaplan et al.'s N: all but the vocabulary matrices (input embedding and output layer).
               non_embedding=sum(size(x) for name, x in shapes.items() if name not in ("embed", "lm_head")),
               params=size(shapes))


@dataclasses.dataclass(frozen=True)
class Branch:
  """A run that spends `budget` FLOPs: `steps` in all, the last `decay` of them the cooldown from step `start`."""
  budget: float
  steps: int
  decay: int
  step_flops: float

  @property
  def start(self) -> int:
    return self.steps - self.decay

  @property
  def flops(self) -> float:
    return self.steps * self.step_flops


def branch(budget: float, step_flops: float, cooldown: float) -> Branch:
  """The steps that spend `budget` FLOPs to within half a step (at least 2), the last round(cooldown x steps)
  (at least 1) decaying."""
  steps = max(2, round(budget / step_flops))
  return Branch(budget, steps, min(steps - 1, max(1, round(cooldown * steps))), step_flops)


@dataclasses.dataclass(frozen=True)
class Plan:
  """One model's budgets: the wsd run (the largest budget, `parent`) and the branches from its stable phase;
  `skipped`: {budget: why not}."""
  parent: Branch
  branches: list
  skipped: dict

  @property
  def keep_steps(self) -> tuple:
    """The parent's checkpoints the branches start from."""
    return tuple(b.start for b in self.branches)

  @property
  def steps(self) -> int:
    """Steps trained in all: the parent's and each branch's decay."""
    return self.parent.steps + sum(b.decay for b in self.branches)


def tokens_per_parameter(b: Branch, m: Model) -> float:
  """D / N of a model trained for a branch's steps."""
  return b.steps * m.tokens_per_step / m.n


def plan(budgets: list[float], m: Model, cooldown: float, warmup_steps: int,
         window: tuple[float, float] = (0.0, float("inf"))) -> Plan:
  """The wsd run and branches that reach each of `budgets` with model `m`. Skipped: a budget whose stable phase
  would be shorter than the warm-up twice over, and one whose tokens per parameter fall outside `window` (far from
  any budget's optimum: Hoffmann et al. trained each budget's sizes around its optimum)."""
  made = sorted((branch(c, m.step_flops, cooldown) for c in budgets), key=lambda b: b.budget)
  skipped = {}
  for b in made:
    ratio = tokens_per_parameter(b, m)
    if b.start < 2 * warmup_steps:
      skipped[b.budget] = f"{b.steps} steps: less stable phase than warm-up"
    elif not window[0] <= ratio <= window[1]:
      skipped[b.budget] = f"{ratio:.2g} tokens per parameter"
  kept = [b for b in made if b.budget not in skipped]
  if not kept:
    raise UserError(f"no budget suits this model ({m.n:,.0f} parameters, {m.step_flops:.3g} FLOPs per step): "
                    + "; ".join(f"{c:.3g}: {why}" for c, why in skipped.items()) + f"; the warm-up is "
                    f"{warmup_steps} steps and --tokens_per_parameter {window[0]:g} to {window[1]:g}: give other "
                    "budgets or remove the size")
  starts = [b.start for b in kept]
  if len(set(starts)) < len(starts):
    raise UserError(f"budgets {', '.join(f'{b.budget:.3g}' for b in kept)} give runs of {[b.steps for b in kept]} "
                    "steps, some the same: give budgets further apart")
  return Plan(kept[-1], kept[:-1], skipped)
