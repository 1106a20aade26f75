"""The config's rules between fields (each field's own valid values are schema.py's), checked by config.validate
before anything is built, so that `pretrain config`, `pretrain launch`, a sweep's points and `pretrain train`
refuse the same configs at once.

check() holds the rules of the config alone; check_with_family() those that depend on the model family that
data.objective trains (the family is known above this layer: pretrain.objectives.validate passes it in).
"""

from pretrain.config.schema import SCHEMA
from pretrain.system.errors import UserError


def require(condition: bool, message: str) -> None:
  if not condition:
    raise UserError(message)


def check(cfg) -> None:
  """The rules between fields that the config alone decides."""
  _train(cfg.train)
  _mup(cfg)
  _moe(cfg.model, cfg.mesh)
  require(cfg.data.pipeline != "indexed" or cfg.train.batch_size % cfg.data.streams == 0,
          f"train.batch_size={cfg.train.batch_size} does not split into data.streams={cfg.data.streams} streams "
          f"(each stream fills a share of every batch); use a multiple of {cfg.data.streams}")
  if cfg.optimizer.schedule == "wsd":
    _wsd(cfg.optimizer, cfg.train.steps)
  else:
    _wsd_fields_unread(cfg.optimizer)


def check_with_family(cfg, family) -> None:
  """The rules between fields and the model `family` (pretrain/families/) that data.objective trains: the
  family's own (Family.check), then those of the options that only some families take."""
  family.check(cfg)
  require(cfg.model.feed_forward == "gated" or family.architecture == "t5",
          f"model.feed_forward={cfg.model.feed_forward!r} is for the encoder-decoder (T5 v1.0, Switch); the "
          f"{family.name} model's feed-forward layers are gated: set model.feed_forward='gated'")
  require(not cfg.model.tie_embeddings or family.architecture != "t5",
          "model.tie_embeddings=True: the encoder-decoder's output projection is its own (T5 v1.1's, untied); set "
          "model.tie_embeddings=False")
  require(not cfg.model.moe_experts or family.moe,
          f"model.moe_experts={cfg.model.moe_experts}: the {family.name} objective's loss does not take the experts' "
          "balancing terms; set model.moe_experts=0 (a dense model) or train another objective")
  require(not cfg.train.harness_tasks or family.generates,
          f"train.harness_tasks runs lm-eval's tasks, which score text with a language model; an {family.name} run "
          "has none: leave train.harness_tasks empty (pretrain probe --task=zero_shot scores masked LMs)")
  mode = cfg.train.harness_mode
  require(not mode or cfg.train.harness_tasks,
          f"train.harness_mode={mode!r} puts a mode token before the contexts of train.harness_tasks, which names no "
          "task: name the tasks, or leave train.harness_mode empty")


def _integer(value) -> bool:
  """An int, not a bool (which Python counts as one: keep_steps=True would read as step 1)."""
  return isinstance(value, int) and not isinstance(value, bool)


def _train(t) -> None:
  profile = tuple(t.profile_steps)
  require(not profile or (len(profile) == 2 and 0 <= profile[0] < profile[1]),
          f"train.profile_steps must be () or (start, stop) with 0 <= start < stop, got {profile}")
  poisoned = tuple(t.spike_test_batches)
  require(all(_integer(b) and b >= 0 for b in poisoned),
          f"train.spike_test_batches must be data batch indices (integers from 0), got {poisoned}")
  require(not poisoned or t.spike_guard,
          "train.spike_test_batches tests the loss-spike guard; set --config.train.spike_guard=True with it")
  kept = tuple(t.keep_steps)
  require(all(_integer(s) and s > 0 for s in kept),
          f"train.keep_steps must be steps (positive integers) whose checkpoints are kept, got {kept}")
  # The data shards divide the microbatches further; how many there are is the mesh's (pretrain.run).
  require(t.batch_size % t.microbatches == 0,
          f"train.batch_size={t.batch_size} does not split into train.microbatches={t.microbatches} microbatches; "
          f"use a multiple of {t.microbatches}")


def _mup(cfg) -> None:
  """What muP (pretrain/models/mup.py) is not defined for here."""
  if cfg.model.parameterization != "mup":
    return
  require(not cfg.model.tie_embeddings and cfg.data.objective != "electra",
          "model.parameterization=mup needs untied embeddings (model.tie_embeddings=False; ELECTRA always ties "
          "them): a tied table cannot be muP's input layer and its output layer at once")
  require(cfg.optimizer.name != "adafactor",
          "model.parameterization=mup is defined for optimizer.name=adamw or muon; Adafactor scales its steps by "
          "each parameter's size, which muP's tables do not cover")


def _moe(m, mesh) -> None:
  """Mixture-of-experts settings (model.moe_*) that the model's shape or the mesh cannot take."""
  if not m.moe_experts:
    return
  require(m.moe_top_k <= m.moe_experts, f"model.moe_top_k={m.moe_top_k} is more than the {m.moe_experts} experts "
                                        "(model.moe_experts); route each token to at most that many")
  for name, depth in {"model.num_layers": m.num_layers, "model.num_decoder_layers": m.num_decoder_layers}.items():
    require(not depth or m.moe_every <= depth, f"model.moe_every={m.moe_every} is more than {name}={depth}: no layer "
                                               "would have experts; lower model.moe_every")
    require(not (depth and m.scan_layers and depth % m.moe_every),
            f"with model.scan_layers the scan repeats units of model.moe_every={m.moe_every} layers; {name}={depth} "
            "is not a multiple: change one, or set model.scan_layers=False")
  require(m.moe_experts % mesh.expert == 0, f"model.moe_experts={m.moe_experts} does not split over mesh.expert="
                                            f"{mesh.expert} devices; make the experts a multiple of mesh.expert")


def wsd_decay_steps(opt_cfg, total_steps: int) -> int:
  """The length of schedule wsd's decay: optimizer.decay_steps, or (0) optimizer.decay_fraction of the run's steps
  (at least 1)."""
  return opt_cfg.decay_steps or max(1, round(opt_cfg.decay_fraction * total_steps))


# wsd's own fields: the other schedules do not read them.
WSD_FIELDS = ("decay_steps", "decay_fraction", "decay_shape")


def _wsd_fields_unread(opt_cfg) -> None:
  changed = [f"optimizer.{k}={opt_cfg[k]!r}" for k in WSD_FIELDS if opt_cfg[k] != SCHEMA["optimizer"][k].default]
  require(not changed, f"{', '.join(changed)} set, but optimizer.schedule={opt_cfg.schedule!r} does not read "
                       f"{'it' if len(changed) == 1 else 'them'} (wsd's decay); set --config.optimizer.schedule=wsd, "
                       "or leave them at their defaults")


def _wsd(opt_cfg, total_steps: int) -> None:
  """Warm-up and decay must fit in the run (the stable phase between them may be empty)."""
  steps = wsd_decay_steps(opt_cfg, total_steps)
  room = total_steps - opt_cfg.warmup_steps
  if steps <= room:
    return
  decay = (f"optimizer.decay_steps={steps}" if opt_cfg.decay_steps else
           f"{steps} (optimizer.decay_fraction={opt_cfg.decay_fraction:g}) of decay")
  fix = (f"set --config.optimizer.decay_steps to at most {room}" if room > 0 else
         f"lower --config.optimizer.warmup_steps below {total_steps}")
  raise UserError(f"optimizer.schedule=wsd: optimizer.warmup_steps={opt_cfg.warmup_steps} of warm-up and {decay} "
                  f"exceed train.steps={total_steps}; {fix}, or raise train.steps")
