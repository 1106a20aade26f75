"""A run's mixture as a function of the training step: which members (an objective over a source) its rows come
from, at what rates.

  data.schedule = ((0, (("ul2_decoder", 1.0),)),
                   (700, (("clm", 1.0),)))

A stage is (from_step, members) or (from_step, members, "ramp"); a member is (objective, rate), over the run's
data.source, or (objective, source, files glob or TFDS NAME:VERSION, rate) over another source (corpus, files or
tfds, as a row of data.mixture). The first stage starts at step 0, the others in increasing order. A stage's
rates hold until the next stage starts; with "ramp" they move linearly to the next stage's rates over the steps
between. A member that a stage does not name has rate 0 there. Rates are relative (each stage's are divided by
their sum).

Without data.schedule the run has one stage: data.objective over data.source, or over each row of data.mixture
at its rate (today's fixed mixture, whose batches the one-stage schedule keeps bit-identical).

Nothing here reads data or knows the objectives: the schedule is parsed with the config, before any work;
pretrain/objectives/ checks that its members train one model.
"""

import dataclasses

import numpy as np

from pretrain.system.errors import UserError

SOURCES = ("corpus", "files", "tfds", "ptb")
RAMP = "ramp"


@dataclasses.dataclass(frozen=True)
class Member:
  objective: str
  source: str    # corpus | files | tfds | ptb
  where: str     # the files glob or TFDS NAME:VERSION ('' for the corpus)


@dataclasses.dataclass(frozen=True)
class Schedule:
  members: tuple[Member, ...]
  steps: tuple[int, ...]                     # each stage's first step, increasing, the first 0
  rates: tuple[tuple[float, ...], ...]       # each stage's rate of each member
  ramps: tuple[bool, ...]                    # whether a stage's rates move linearly to the next stage's

  @property
  def fixed(self) -> bool:
    """One stage: the rates never change."""
    return len(self.steps) == 1

  @property
  def objectives(self) -> tuple[str, ...]:
    return tuple(dict.fromkeys(m.objective for m in self.members))

  @property
  def names(self) -> tuple[str, ...]:
    """Each member's name in metrics: its objective, with its source where two members share an objective."""
    repeated = {o for o in self.objectives if sum(m.objective == o for m in self.members) > 1}
    return tuple(f"{m.objective}@{i}" if m.objective in repeated else m.objective for i, m in enumerate(self.members))

  def shares(self, k: int) -> np.ndarray:
    """Stage k's rates, normalised to sum to 1."""
    rates = np.asarray(self.rates[k], np.float64)
    return rates / rates.sum()

  def rates_at(self, step: float) -> np.ndarray:
    """The members' shares of the rows at `step`: the stage's, or along a ramp between two stages' shares."""
    k = int(np.searchsorted(self.steps, step, side="right")) - 1
    if not self.ramps[k]:
      return self.shares(k)
    t = (step - self.steps[k]) / (self.steps[k + 1] - self.steps[k])
    return (1 - t) * self.shares(k) + t * self.shares(k + 1)

  def describe(self) -> str:
    """One line per stage, e.g. 'from step 700: clm 1.00'."""
    lines = []
    for k, step in enumerate(self.steps):
      shares = ", ".join(f"{n} {r:.2f}" for n, r in zip(self.names, self.shares(k)) if r)
      lines.append(f"from step {step}: {shares}" + (f", moving linearly to step {self.steps[k + 1]}'s"
                                                      if self.ramps[k] else ""))
    return "\n".join(lines)


def _where(data_cfg, source: str) -> str:
  return {"files": data_cfg.train_files, "tfds": data_cfg.tfds_name}.get(source, "")


def rows(value, key: str, form: str) -> list[tuple]:
  """The rows of a structured field (a tuple of tuples), or one line showing its form."""
  if not isinstance(value, (tuple, list)) or not all(isinstance(row, (tuple, list)) for row in value):
    raise UserError(f"{key}={value!r} is invalid; write {form}")
  return [tuple(row) for row in value]


MEMBER_FORM = "(objective, rate) or (objective, corpus | files | tfds | ptb, files glob or TFDS NAME:VERSION, rate)"


def _member(data_cfg, row, step: int) -> tuple[Member, float]:
  if len(row) == 2:
    row = (row[0], data_cfg.source, _where(data_cfg, data_cfg.source), row[1])
  if (len(row) != 4 or not isinstance(row[0], str) or row[1] not in SOURCES or not isinstance(row[2], str)
      or isinstance(row[3], bool) or not isinstance(row[3], (int, float)) or not row[3] >= 0):
    raise UserError(f"data.schedule member {tuple(row)!r} (of the stage from step {step}) is invalid; write "
                    f"{MEMBER_FORM}, with a rate >= 0")
  return Member(row[0], row[1], row[2]), float(row[3])


def mixture_members(data_cfg) -> list[tuple[Member, float]]:
  """data.objective over each row of data.mixture, (source, files glob or TFDS NAME:VERSION, rate), with its rate."""
  members = []
  form = "((source, files glob or TFDS name, rate), ...)"
  for row in rows(data_cfg.mixture, "data.mixture", form):
    if (len(row) != 3 or row[0] not in SOURCES or isinstance(row[2], bool) or not isinstance(row[2], (int, float))
        or not row[2] >= 0):
      raise UserError(f"data.mixture row {row} is invalid; write (source, files glob or TFDS name, rate) "
                      "with source corpus, files, tfds or ptb and a non-negative rate")
    members.append((Member(data_cfg.objective, row[0], row[1]), float(row[2])))
  if not sum(rate for _, rate in members) > 0:
    raise UserError(f"data.mixture's rates sum to 0 ({data_cfg.mixture}); give at least one row a positive rate")
  return members


def parse(data_cfg) -> Schedule:
  """The schedule of a `data` config section (see the module's docstring); refuses an invalid one with one line."""
  if not data_cfg.schedule:
    if not data_cfg.mixture:
      member = Member(data_cfg.objective, data_cfg.source, _where(data_cfg, data_cfg.source))
      return Schedule((member,), (0,), ((1.0,),), (False,))
    members = mixture_members(data_cfg)
    return Schedule(tuple(m for m, _ in members), (0,), (tuple(rate for _, rate in members),), (False,))
  if data_cfg.mixture:
    raise UserError("data.schedule and data.mixture are both set; name each source in the schedule's members, "
                    "(objective, source, files glob or TFDS name, rate), and leave data.mixture empty")
  stages = rows(data_cfg.schedule, "data.schedule", "((from_step, members), ...), e.g. ((0, (('clm', 1.0),)),)")
  for row in stages:
    if (len(row) not in (2, 3) or isinstance(row[0], bool) or not isinstance(row[0], int)
        or not isinstance(row[1], (tuple, list)) or (len(row) == 3 and row[2] != RAMP)):
      raise UserError(f"data.schedule stage {row!r} is invalid; write (from_step, members) or (from_step, members, "
                      "'ramp'), e.g. (700, (('clm', 1.0),))")
  steps = [row[0] for row in stages]
  if steps[0] != 0 or any(b <= a for a, b in zip(steps, steps[1:])):
    raise UserError(f"data.schedule's stages start at steps {steps}; the first must start at 0 and each later one "
                    "after the one before it")
  if len(stages[-1]) == 3:
    raise UserError(f"data.schedule's last stage (from step {steps[-1]}) ramps towards no stage; a ramp moves a "
                    "stage's rates to the next stage's")
  members, rates = [], []
  for step, stage_members, *_ in stages:
    stage = {}
    for row in rows(stage_members, f"data.schedule's members from step {step}", f"({MEMBER_FORM}, ...)"):
      member, rate = _member(data_cfg, row, step)
      if member in stage:
        raise UserError(f"data.schedule's stage from step {step} names {member.objective} over {member.source} "
                        "twice; give each member once")
      stage[member] = rate
      if member not in members:
        members.append(member)
    if not sum(stage.values()) > 0:
      raise UserError(f"data.schedule's stage from step {step} has rates summing to {sum(stage.values())}; give at "
                      "least one member a positive rate")
    rates.append(stage)
  return Schedule(tuple(members), tuple(steps), tuple(tuple(r.get(m, 0.0) for m in members) for r in rates),
                  tuple(len(row) == 3 for row in stages))


def unreached(plan: Schedule, stages, steps: int) -> str | None:
  """A line for stages of data.schedule and data.length_schedule (`stages`: LengthStage) that start at or after the
  run's last step, which it never trains, else None."""
  late = [*(f"data.schedule's stage from step {s}" for s in plan.steps if s >= steps),
          *(f"data.length_schedule's stage from step {s.step}" for s in stages if s.step >= steps)]
  if not late:
    return None
  return (f"Note: {' and '.join(late)} start{'s' * (len(late) == 1)} at or after train.steps={steps}: the run never "
          f"trains {'it' if len(late) == 1 else 'them'} (a longer run, or a resume to more steps, does)")


@dataclasses.dataclass(frozen=True)
class LengthStage:
  """A stage of data.length_schedule: from `step` on, rows of length/full of the config's lengths, `rows` a step."""
  step: int
  length: int   # tokens of a row (the model's, Family.row_lengths: an MLM row's features are one sequence)
  full: int     # tokens of a row at the config's lengths
  rows: int     # rows per step
  labels: tuple[str, ...] = ()  # features that are a label, not tokens: unscaled (Family.label_features)

  def scaled(self, lengths: dict[str, int]) -> dict[str, int]:
    """Feature lengths (the config's, of any member) at this stage's row length."""
    return {k: v if k in self.labels else v * self.length // self.full for k, v in lengths.items()}


def length_stages(data_cfg, family, lengths: dict[str, int], batch_size: int) -> tuple[LengthStage, ...]:
  """The stages of data.length_schedule, ((from_step, row length), ...), for the run's task `lengths` of the model
  `family` (one stage at the config's lengths without it). Sequence-length warmup (Li et al. 2022): the row length
  grows to the config's; data.length_warmup='tokens' keeps a step's tokens (batch_size x full / length rows),
  'rows' its rows."""
  full = sum(family.row_lengths(lengths).values())
  labels = tuple(k for k in family.label_features if k in lengths)
  tokens = {k: v for k, v in lengths.items() if k not in labels}
  form = (f"((from_step, row length), ...), e.g. ((0, {max(full // 4, 1)}), (100, {max(full // 2, 1)}), "
          f"(200, {full}))")
  given = rows(data_cfg.get("length_schedule", ()), "data.length_schedule", form) or [(0, full)]
  if any(len(r) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in r) for r in given):
    raise UserError(f"data.length_schedule={data_cfg.length_schedule!r} is invalid; write {form}")
  steps = [step for step, _ in given]
  if steps[0] != 0 or any(b <= a for a, b in zip(steps, steps[1:])):
    raise UserError(f"data.length_schedule's stages start at steps {steps}; the first must start at 0 and each "
                    "later one after the one before it")
  if given[-1][1] != full:
    raise UserError(f"data.length_schedule ends at rows of {given[-1][1]} tokens; its last stage must be the "
                    f"config's row of {full} (data.seq_len, or inputs_length + targets_length), which evaluation "
                    "and the memory check use")
  stages = []
  for step, length in given:
    if not 0 < length <= full or full % length or any(v * length % full for v in tokens.values()):
      raise UserError(f"data.length_schedule's row of {length} tokens (from step {step}) must divide the row of "
                      f"{full} so that every feature ({tokens}) shrinks by a whole factor; e.g. {full // 2}")
    stages.append(LengthStage(step, length, full, batch_size * full // length
                              if data_cfg.get("length_warmup", "tokens") == "tokens" else batch_size, labels))
  return tuple(stages)


def stage_at(stages, step: int) -> int:
  """The index of the stage (a LengthStage, or a step of a Schedule) that holds `step`."""
  return int(np.searchsorted([s.step for s in stages], step, side="right")) - 1
