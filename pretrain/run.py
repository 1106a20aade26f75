"""One run's setup, built once from a config: family, model, mesh and rules,
optimizer, shardings, state and the jitted steps, plus (for runs that read
data) the vocabulary and the registered tasks.

Every entry point builds its run here, so train, eval, generate, export,
bench, estimate-memory, the experiments and the tests cannot drift apart:

  Run.build(cfg[, vocab_size])      the model side only (bench, estimate-memory)
  Run.build_with_data(cfg)          plus vocabulary and tasks (training, inspection)
  load(workdir)                     a trained run and its latest parameters (eval, generate, export)

Every check of a config (pretrain.objectives.validate: what every command runs on the config of its command line)
is made again while building, before anything is compiled; only what needs the devices (the mesh) is left to it.
"""

import contextlib
import dataclasses
import functools
import os

import flax.linen as nn
import jax
import ml_collections
import numpy as np

from pretrain import models, objectives, vocab as text_vocab
from pretrain.data import schedule as schedule_lib
from pretrain.families import Family
from pretrain.models import mup
from pretrain.models.pipeline import Schedule
from pretrain.parallel import mesh as mesh_lib
from pretrain.system import data_cache, tf_loader
from pretrain.system.console import log
from pretrain.system.errors import UserError
from pretrain.train import checkpoint, optimizer, state as state_lib, steps
# A run's files in its workdir, read here to load a run (and by the commands, as run.saved_config, ...).
from pretrain.workdir import VOCAB_FILES, saved_config, vocabulary_file  # pylint: disable=unused-import

def objective(cfg, name: str | None = None) -> objectives.Objective:
  """The objective `name` (default data.objective) with the config's data settings and seed."""
  return objectives.make(name or cfg.data.objective, cfg.data, cfg.train.seed)


def _checked_family(cfg) -> Family:
  """The model family of a config whose values, objectives and rules between fields are checked."""
  objectives.validate(cfg)
  return objectives.run_family(cfg)


def check_context_split(cfg, family: Family, split: int) -> None:
  """Refuses rows whose positions the context axis (`split` devices) does not divide."""
  if split == 1:
    return
  lengths = family.task_lengths(cfg.data)
  rows = family.row_lengths(lengths)
  for stage in schedule_lib.length_stages(cfg.data, family, lengths, cfg.train.batch_size)[:-1]:
    rows.update({f"{name} from step {stage.step} (data.length_schedule)": n
                 for name, n in family.row_lengths(stage.scaled(lengths)).items()})
  uneven = [f"{name} ({n} tokens)" for name, n in rows.items() if n % split]
  if uneven:
    raise UserError(f"the rows' {', '.join(uneven)} do not split over the {split} devices of the context axis "
                    f"(mesh.context={cfg.mesh.context}); use row lengths that are multiples of {split}, or a smaller "
                    "mesh.context")


def check_pipeline(cfg, family: Family, model: nn.Module, schedule: Schedule) -> None:
  """Refuses a pipeline `schedule` (mesh.stage devices splitting the scanned layers) that the model cannot run,
  or whose microbatches would leave most of the step idle."""
  axis = f"mesh.stage={schedule.stages}"
  if not isinstance(model, models.DecoderOnly):
    raise UserError(f"{axis}: the {family.name} family's model does not pipeline (only the decoder-only model's "
                    "layers do, causal or prefix LM, and the BERT-style encoder's); leave mesh.stage at 1 and "
                    "split it over mesh.fsdp and mesh.tensor")
  c = model.config
  if not c.scan_layers:
    raise UserError(f"{axis}: the stages split the scanned layers; set model.scan_layers=True")
  chunks, unit = schedule.stages * schedule.repeats, max(c.moe.layer_every, 1)
  if c.num_layers % (chunks * unit):
    units = f" in units of {unit} (model.moe_every)" if unit > 1 else ""
    raise UserError(f"{axis}: the {c.num_layers} layers (model.num_layers){units} do not split into "
                    f"{schedule.stages} stages x {schedule.repeats} repeats (mesh.stage_repeats); use stages and "
                    f"repeats whose product divides {c.num_layers // unit}")
  if schedule.microbatches < schedule.stages:
    more = dataclasses.replace(schedule, microbatches=schedule.stages * 4)
    raise UserError(f"{axis}: train.microbatches={schedule.microbatches} are fewer than the {schedule.stages} stages, "
                    f"so each stage would idle {schedule.bubble:.0%} of a step; use train.microbatches="
                    f"{schedule.stages} or more (the pipeline's microbatches; {more.microbatches}: {more.bubble:.0%} "
                    "idle)")


@dataclasses.dataclass
class Run:
  cfg: ml_collections.ConfigDict
  family: Family
  vocab_size: int            # ids of the vocabulary (the embedding may have more rows)
  model: nn.Module
  mesh: jax.sharding.Mesh
  rules: tuple
  # With data (build_with_data, load): the vocabulary, the sources and the registered tasks.
  vocabulary: object = None  # pretrain.vocab.pipeline's (seqio's), or text_vocab's (run.load(pipeline=False))
  sources: list = dataclasses.field(default_factory=list)  # the Source of each member of the schedule
  task: str = ""
  eval_tasks: dict = dataclasses.field(default_factory=dict)  # {task name: objective}, from data.eval_objectives

  @classmethod
  def build(cls, cfg, vocab_size: int = 0, vocabulary=None, devices=None) -> "Run":
    """The model side of a run for a vocabulary of `vocab_size` ids (0: as many as the embedding has rows,
    model.vocab_size, or else tokenizer.vocab_size; or `vocabulary`'s); checks the config first. Its mesh spans
    `devices` (default: all of the process's; a TPU slice's, pretrain/parallel/tpu.py, to compile for it), and
    what it chooses by platform follows theirs."""
    vocab_size = vocab_size or (vocabulary.vocab_size if vocabulary else 0) or cfg.model.vocab_size \
        or cfg.tokenizer.vocab_size
    return cls._build(cfg, vocab_size, _checked_family(cfg), devices=devices, vocabulary=vocabulary)

  @classmethod
  def _build(cls, cfg, vocab_size: int, family: Family, devices=None, **data) -> "Run":
    mesh, rules = mesh_lib.make_mesh(cfg.mesh, devices), mesh_lib.rules(cfg.mesh)
    data_shards = mesh_lib.data_parallel_size(mesh, rules)
    t = cfg.train
    if t.batch_size % data_shards:
      raise UserError(f"train.batch_size={t.batch_size} does not divide across {data_shards} data shards; "
                      f"use a multiple of {data_shards}")
    if t.batch_size % (t.microbatches * data_shards):
      raise UserError(f"train.batch_size={t.batch_size} does not split into train.microbatches={t.microbatches} "
                      f"microbatches across {data_shards} data shards; use a multiple of "
                      f"{t.microbatches * data_shards}")
    check_context_split(cfg, family, mesh_lib.length_split(mesh, rules))
    with jax.set_mesh(mesh):  # The model's dtype follows the mesh's platform (model.dtype=auto).
      model = family.build(cfg.model, vocab_size)
    stages = mesh_lib.layer_split(mesh, rules)
    if stages == 1 and cfg.mesh.stage_repeats > 1:
      raise UserError(f"mesh.stage_repeats={cfg.mesh.stage_repeats} shapes a pipeline, but no stage axis splits the "
                      "layers; set mesh.stage (with the fsdp_tensor or t5x rules), or leave mesh.stage_repeats at 1")
    if stages > 1:  # The step's microbatches flow through the pipeline instead of accumulating one by one.
      schedule = Schedule(stages, t.microbatches, cfg.mesh.stage_repeats)
      check_pipeline(cfg, family, model, schedule)
      model = model.clone(config=dataclasses.replace(model.config, pipeline=schedule))
    return cls(cfg, family, vocab_size, model, mesh, rules, **data)

  @functools.cached_property
  def objective(self) -> objectives.Objective:
    """data.objective with the run's data settings and seed."""
    return objective(self.cfg)

  @functools.cached_property
  def schedule(self):
    """The members (an objective over a source) of the run's rows and their rates by step (data.schedule; one
    stage of data.objective by default; checked with the config)."""
    return schedule_lib.parse(self.cfg.data)

  @functools.cached_property
  def length_stages(self) -> tuple:
    """The stages of data.length_schedule (one at the config's lengths without it): rows and their length."""
    return schedule_lib.length_stages(self.cfg.data, self.family, self.task_lengths, self.cfg.train.batch_size)

  @property
  def members_reported(self) -> int:
    """How many members the train step reports one by one (0: none; a family with loss terms of its own reports
    no parts, and the replay pipeline's seqio Mixture does not say which member a row is from)."""
    reported = len(self.schedule.members) > 1 and self.family.mixes and self.cfg.data.pipeline == "indexed"
    return len(self.schedule.members) if reported else 0

  @classmethod
  def build_with_data(cls, cfg) -> "Run":
    """A run that reads its data: the vocabulary (trained on first use), the task and the evaluation tasks."""
    from pretrain.data import sources, tasks  # pylint: disable=g-import-not-at-top  (data stack: not for generate)
    from pretrain.vocab import pipeline as vocab  # pylint: disable=g-import-not-at-top  (data stack: not for generate)
    family = _checked_family(cfg)
    objective_ = objective(cfg)  # Checks the objective's values.
    extra = {name: objective(cfg, name) for name in cfg.data.eval_objectives}
    if cfg.data.task:
      name, vocabulary = tasks.user_task(cfg.data, cfg.tokenizer, family)
      return cls._build(cfg, vocabulary.vocab_size, family, vocabulary=vocabulary, task=name)
    # A given vocabulary is checked before the sources are made: preparing one can take minutes.
    given = vocab.load(cfg.tokenizer.path, cfg.tokenizer.extra_ids) if cfg.tokenizer.path else None
    if given is not None:  # The file's kind is the run's (also one the command line could not read: gs://).
      text_vocab.take_kind(cfg.tokenizer, given.kind)
    plan = schedule_lib.parse(cfg.data)
    member_sources = sources.schedule_sources(cfg.data, plan.members)
    # The first source trains it (unless tokenizer.path).
    vocabulary = given if given is not None else vocab.get_vocabulary(cfg, member_sources[0], objectives.pieces(cfg))
    for member, source in zip(plan.members, member_sources):
      objective(cfg, member.objective).check_source(source, vocabulary)
    if cfg.data.schedule:  # Evaluated on the first member's source: data.objective, and each member's objective.
      evaluated = [(member_sources[0], 1.0)]
      extra.update({name: objective(cfg, name) for name in plan.objectives if name != objective_.name})
    else:
      evaluated = list(zip(member_sources, plan.rates[0]))  # data.source, or data.mixture at its rates
    return cls._build(cfg, vocabulary.vocab_size, family, vocabulary=vocabulary, sources=member_sources,
                      task=tasks.register_mixture(evaluated, vocabulary, objective_),
                      eval_tasks={tasks.register_mixture(evaluated, vocabulary, o): o for o in extra.values()})

  @property
  def data_shards(self) -> int:
    """How many ways the batch is split (the data-parallel mesh axes)."""
    return mesh_lib.data_parallel_size(self.mesh, self.rules)

  @property
  def source(self):
    """The first data source: it trains the vocabulary and gives sample prompts (None with data.task)."""
    return self.sources[0] if self.sources else None

  @functools.cached_property
  def task_lengths(self) -> dict[str, int]:
    return self.family.task_lengths(self.cfg.data)

  @functools.cached_property
  def example_args(self) -> tuple:
    return self.family.example_args(self.task_lengths)

  @functools.cached_property
  def param_axes(self):
    """The logical axis names of every parameter: what muP scales and Muon orthogonalises (models/mup.py)."""
    args = self.example_args  # Made outside the trace: it is cached.
    return mup.axis_names(jax.eval_shape(lambda: self.model.init(jax.random.key(0), *args)["params"]))

  @functools.cached_property
  def param_roles(self):
    """vector | input | hidden | output of every parameter (models/mup.py)."""
    return mup.roles(self.param_axes)

  @functools.cached_property
  def tx(self):
    """The optimizer (optax), with muP's per-parameter multipliers under model.parameterization=mup."""
    ratio = mup.width_ratio(self.cfg.model)
    return optimizer.make(self.cfg.optimizer, self.cfg.train.steps, self.param_axes,
                          mup.lr_scales(self.param_roles, ratio) if ratio != 1 else None)

  @functools.cached_property
  def init_scales(self):
    """Multipliers of each parameter's initialisation (muP's output matrices), None when all are 1."""
    ratio = mup.width_ratio(self.cfg.model)
    return mup.init_scales(self.param_roles, ratio) if ratio != 1 else None

  @contextlib.contextmanager
  def activated(self):
    """The mesh and logical axis rules, for creating state and running steps."""
    with jax.set_mesh(self.mesh), nn.logical_axis_rules(self.rules):
      yield

  @functools.cached_property
  def state_shardings(self):
    with self.activated():
      return state_lib.shardings(self.model, self.tx, self.example_args, self.init_scales, self.mesh, self.rules)

  @functools.cached_property
  def batch_sharding(self):
    return mesh_lib.batch_sharding(self.mesh, self.rules)

  @functools.cached_property
  def data_share(self) -> mesh_lib.DataShare:
    """The block of every batch's rows that this process reads (parallel/mesh.py)."""
    return mesh_lib.data_share(self.batch_sharding)

  def abstract_state(self):
    with self.activated():
      return state_lib.abstract(self.model, self.tx, self.example_args, self.init_scales, self.state_shardings)

  def create_state(self):
    with self.activated():
      return state_lib.create(self.model, self.tx, self.example_args, self.init_scales, self.state_shardings,
                              self.cfg.train.seed)

  def abstract_batch(self) -> dict:
    batch = self.family.abstract_batch(self.cfg.train.batch_size, self.task_lengths, self.batch_sharding)
    if self.members_reported:
      batch["member"] = self.family.targets_and_weights(batch)[0]
    return batch

  def random_batch(self) -> dict:
    """A global batch of random tokens, shaped as the data pipeline's."""
    local = self.family.random_batch(self.cfg.train.batch_size // self.data_share.count, self.task_lengths,
                                     self.vocab_size)
    if self.members_reported:
      local["member"] = np.zeros_like(self.family.targets_and_weights(local)[0])
    return mesh_lib.global_batch(local, self.batch_sharding)

  @functools.cached_property
  def replicated(self):
    return jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec())

  @property
  def pipeline(self) -> Schedule | None:
    """The schedule of the model's pipeline (mesh.stage > 1, under rules that split 'layers'), or None."""
    return getattr(getattr(self.model, "config", None), "pipeline", None)

  @functools.cached_property
  def train_step(self):
    """(state, global batch) -> (state, metrics), compiled on first call; the state is donated."""
    return self._compiled_step(guarded=False)

  @functools.cached_property
  def guarded_step(self):
    """(state, global batch, the spike guard's arrays) -> (state, metrics, the guard's arrays): train_step with
    train.spike_guard (pretrain/train/spike_guard.py)."""
    return self._compiled_step(guarded=True)

  def _compiled_step(self, guarded: bool):
    c = self.cfg
    step = steps.make_train_step(self.family, self.model, self.tx, optimizer.schedule(c.optimizer, c.train.steps),
                                 c.loss, 1 if self.pipeline else c.train.microbatches,
                                 self.members_reported,
                                 spike_guard=c.train if guarded else None)
    guard = (self.replicated,) if guarded else ()
    return jax.jit(step, in_shardings=(self.state_shardings, self.batch_sharding, *guard),
                   out_shardings=(self.state_shardings, None, *guard), donate_argnums=(0,))

  @functools.cached_property
  def eval_step(self):
    """(params, global batch) -> the family's loss sums (family.eval_metrics); with the run's vocabulary, also the
    bytes of the targets' text, for bits per byte."""
    bytes_per_id = None
    if self.vocabulary is not None:
      bytes_per_id = text_vocab.bytes_per_id(self.vocabulary)
    return jax.jit(steps.make_eval_step(self.family, self.model, self.cfg.loss, bytes_per_id),
                   in_shardings=(self.state_shardings.params, self.batch_sharding))

  def batches(self, split: str, task: str = "", objective_=None, **kwargs):
    """This host's batches of `task` (default: the run's) as numpy arrays; see replay.batches."""
    from pretrain.data import replay  # pylint: disable=g-import-not-at-top  (data stack: not for generate)
    c, objective_ = self.cfg, objective_ or self.objective
    return replay.batches(task or self.task, split, objective_.family.task_lengths(c.data), c.train.batch_size,
                          objective_.family, seed=c.train.seed, host_sharding=self.host_sharding(objective_),
                          share=self.data_share, **kwargs)

  def host_sharding(self, objective_=None) -> str:
    """data.host_sharding, but 'examples' in a stream context: a host's shard of the documents would join every
    n-th document into its rows, so each host reads the whole text in order and keeps its share of the rows."""
    return "examples" if (objective_ or self.objective).in_order else self.cfg.data.host_sharding

  def restore(self, saver: checkpoint.Checkpointer, step: int, what: str, params_only: bool = False):
    """The state saved at `step` (with `params_only`, its parameters alone), after checking their shapes against
    the model's."""
    target = self.abstract_state()
    models.check_shapes(saver.saved_params(step), target.params, what)
    with self.activated():
      return saver.restore_params(step, target.params) if params_only else saver.restore(step, target)

  def member_tasks(self) -> list:
    """(seqio task, source, objective) of each member of the schedule (one for a single source), registered."""
    seqio = tf_loader.seqio()
    from pretrain.data import tasks  # pylint: disable=g-import-not-at-top  (data stack: not for generate)
    members = []
    for member, source in zip(self.schedule.members, self.sources):
      objective_ = objective(self.cfg, member.objective)
      members.append((seqio.get_mixture_or_task(tasks.register(source, self.vocabulary, objective_)), source,
                      objective_))
    return members

  def train_batches(self, position: dict | None = None, step: int = 0):
    """This host's training batches from a checkpoint's data `position` (None: the start) at `step`, an iterator
    whose position() is what the next checkpoint records (see data.pipeline)."""
    c = self.cfg
    if c.data.task and c.data.pipeline == "indexed":
      log(f"data.task={self.task} is read with data.pipeline=replay: its preprocessors are its own, so the indexed "
          "pipeline cannot address its examples; resuming passes over the examples read before.")
    if c.data.pipeline == "replay" or c.data.task:
      # pylint: disable-next=g-import-not-at-top  (data stack: not for generate)
      from pretrain.data.replay import ReplayBatches
      return ReplayBatches(self.task, self.task_lengths, self.family, batch_size=c.train.batch_size,
                           seed=c.train.seed, host_sharding=self.host_sharding(), share=self.data_share,
                           position=position)
    # pylint: disable-next=g-import-not-at-top  (data stack: not for generate)
    from pretrain.data.indexed import IndexedBatches
    members = [(task, source, o.family.converter(), o.family.task_lengths(c.data), o.in_order)
               for task, source, o in self.member_tasks()]
    return IndexedBatches(members, self.schedule, self.vocabulary, self.family, self.task_lengths, task=self.task,
                          batch_size=c.train.batch_size, streams=c.data.streams, share=self.data_share,
                          seed=c.train.seed, cache=data_cache.cache_dir(c.data), saved_position=position, step=step,
                          report_members=bool(self.members_reported), length_stages=self.length_stages)

  def flops_per_example(self, params, task_lengths: dict[str, int] | None = None) -> float:
    """Model FLOPs of a row at the config's lengths, or at `task_lengths` (a stage of data.length_schedule)."""
    return self.family.flops_per_example(params, self.cfg.model, task_lengths or self.task_lengths)


def load(workdir: str, pipeline: bool = True, step: int | None = None,
         dropless: bool = False) -> tuple[Run, object, int]:
  """(run, parameters, step) of the latest checkpoint of a training run's workdir (or of `step`). Its vocabulary
  is a seqio vocabulary, for the data pipelines; with `pipeline` False, for commands that only encode and decode
  text, read without TensorFlow (text_vocab). With `dropless`, a mixture of experts trained with capacity
  dispatch routes every token to its experts (model.moe_capacity_factor=0), as its Hugging Face export does.
  Only the parameters are read, not the optimizer state."""
  cfg = saved_config(workdir)
  if dropless:
    cfg.model.moe_capacity_factor = 0.0
  elif cfg.model.get("moe_experts") and cfg.model.get("moe_capacity_factor"):
    log(f"Note: this mixture of experts drops tokens past its experts' capacity (model.moe_capacity_factor="
        f"{cfg.model.moe_capacity_factor:g}), as in training; its Hugging Face export routes every token (dropless), "
        "so its outputs differ: ask for dropless (generate --dropless, lm-eval's dropless=true) to match the export")
  if pipeline:
    from pretrain.vocab import pipeline as vocab  # pylint: disable=g-import-not-at-top  (the data stack)
    vocabulary = vocab.load(vocabulary_file(workdir), cfg.tokenizer.extra_ids)
  else:
    vocabulary = text_vocab.load(vocabulary_file(workdir), cfg.tokenizer.extra_ids)
  run = Run.build(cfg, vocabulary=vocabulary)
  saver = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), cfg.train.keep_checkpoints, move_aside=False)
  try:
    latest = saver.latest_step()
    if latest is None:
      raise UserError(f"{workdir!r} has no checkpoint yet; train first (or wait for train.checkpoint_every steps)")
    if step is not None:
      saver.check_has(step, workdir)
    step = latest if step is None else step
    params = run.restore(saver, step, f"the checkpoint of step {step} in {workdir!r}", params_only=True)
  finally:
    saver.close()
  return run, params, step
