"""A compute budget as training steps, and a wsd run that reaches several budgets by cooldown branches.

A step's FLOPs are the model FLOPs `pretrain bench` counts (pretrain/train/flops.py): 6 per parameter per token it
multiplies (all but the input embedding) plus the attention's 12 x layers x heads x head_dim per query-key pair,
full, not causally halved. A budget of C FLOPs is round(C / step FLOPs) steps, which reach C within half a step;
the last `cooldown` share of them decays (pretrain cooldown). One wsd run per model trains to the largest budget,
its own decay that budget's; the smaller budgets branch from its stable phase, each at S = its steps - D and
decaying over D: a budget costs D steps more, not S + D.
"""

import dataclasses

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
  import jax  # pylint: disable=g-import-not-at-top
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
  `skipped`: the budgets too small for the warm-up."""
  parent: Branch
  branches: list
  skipped: list

  @property
  def keep_steps(self) -> tuple:
    """The parent's checkpoints the branches start from."""
    return tuple(b.start for b in self.branches)

  @property
  def steps(self) -> int:
    """Steps trained in all: the parent's and each branch's decay."""
    return self.parent.steps + sum(b.decay for b in self.branches)


def plan(budgets: list[float], step_flops: float, cooldown: float, warmup_steps: int) -> Plan:
  """The wsd run and branches that reach each of `budgets`; a budget whose branch would start before the warm-up
  has ended twice over (less stable phase than warm-up) is skipped."""
  made = sorted((branch(c, step_flops, cooldown) for c in budgets), key=lambda b: b.budget)
  kept = [b for b in made if b.start >= 2 * warmup_steps]
  if not kept:
    raise UserError(f"every budget is too small for this model: the largest, {max(budgets):.3g} FLOPs, is "
                    f"{made[-1].steps} steps of {step_flops:.3g}, and its stable phase must be at least as long as "
                    f"the warm-up ({warmup_steps} steps); give larger budgets or a smaller model")
  starts = [b.start for b in kept]
  if len(set(starts)) < len(starts):
    raise UserError(f"budgets {', '.join(f'{b.budget:.3g}' for b in kept)} give runs of {[b.steps for b in kept]} "
                    "steps, some the same: give budgets further apart")
  return Plan(kept[-1], kept[:-1], [b for b in made if b not in kept])
