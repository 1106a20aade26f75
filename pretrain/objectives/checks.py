"""Every check of a config before anything is built: the fields, the rules between them with the run's family,
the named objectives' own checks, their schedule, their evaluation objectives and the vocabulary they need."""

import difflib
import json

from pretrain import config as config_lib, vocab
from pretrain.data import schedule as schedule_lib
from pretrain.objectives.registry import get, known, named, pieces, run_family, settings, trained, unread_settings
from pretrain.parallel import mesh as mesh_lib
from pretrain.system.errors import UserError


def validate(cfg) -> None:
  """Every check of a config before anything is built: its fields' valid values (config.RANGES and the
  objectives' settings), the rules between fields (config/rules.py, with the run's family), the named objectives'
  own checks (lengths, noise), their schedules and the vocabulary they need. A user's seqio task (data.task)
  brings its own preprocessors: then data.objective only chooses the model family."""
  specs = known(cfg)
  config_lib.validate(cfg, {key: s.valid for key, s in settings(specs).items() if s.valid is not None})
  if not cfg.data.task:
    for spec in named(cfg):
      spec.check(cfg)
  _check_unread(cfg, specs)  # A user's task reads none of them.
  check_schedule(cfg)
  family = run_family(cfg)
  config_lib.check_with_family(cfg, family)
  mesh_lib.rules(cfg.mesh)  # A preset's name or (logical axis, mesh axes) pairs, before a mesh is built.
  check_mode(cfg, cfg.train.harness_mode, "train.harness_mode")
  _check_eval_objectives(cfg)
  stages = schedule_lib.length_stages(cfg.data, family, family.task_lengths(cfg.data), cfg.train.batch_size)
  if stages[1:] and (cfg.data.task or cfg.data.pipeline != "indexed"):
    raise UserError("data.length_schedule packs rows of each length from the token store: it needs "
                    "data.pipeline=indexed over data.source (not data.task)")
  for stage in stages[:-1]:
    _check_stage(cfg, stage)
  if not (cfg.tokenizer.path or cfg.data.task or cfg.train.init_from_hf):  # Else the vocabulary is given.
    vocab.check_size(cfg.tokenizer.kind, cfg.tokenizer.vocab_size, cfg.tokenizer.extra_ids, pieces(cfg))


def check_mode(cfg, mode: str | None, flag: str) -> None:
  """Refuses a mode token (lm-eval's --mode, train.harness_mode) that the run's examples never began with: its
  trained objectives' (data.objective and data.schedule's) mode tokens; a user's own seqio task (data.task) is
  taken at its word where its model family reads inputs at all."""
  if not mode:
    return
  family = run_family(cfg)
  if cfg.data.task:
    if not family.reads_mode_tokens(family.task_lengths(cfg.data)):
      raise UserError(f"{flag}={mode!r} puts a mode token before the inputs of a model trained with one; this "
                      f"{family.name} run reads its contexts as they are: leave {flag} empty")
    return
  names = trained(cfg)
  modes = list(dict.fromkeys(t for name in names for t in get(name).mode_tokens))
  if mode not in modes:
    raise UserError(f"{flag}={mode!r} is not a mode token this run trained with: "
                    + (f"its examples begin with {', '.join(modes)}; give one of them" if modes else
                       f"its objectives ({', '.join(names)}) put none before their inputs; leave {flag} empty"))


def refuse_unknown_keys(cfg) -> None:
  """A UserError naming a field of `cfg` (as a config file wrote it) that no part of the project reads: a mistyped
  one (train.step) would otherwise leave the field meant (train.steps) at its value, unsaid."""
  fields = {*config_lib.flat_keys(config_lib.schema.defaults()), *settings(known(cfg))}
  unknown = [key for key in config_lib.flat_keys(cfg) if key not in fields]
  if unknown:
    close = difflib.get_close_matches(unknown[0], sorted(fields), n=1, cutoff=0.4)
    raise UserError(f"the config sets {', '.join(unknown)}, which no part of the project reads"
                    + (f"; did you mean {close[0]}?" if close else "")
                    + " (`pretrain config --fields` lists the fields)")


def _check_stage(cfg, stage) -> None:
  """The named objectives' own checks at a stage of data.length_schedule: its rows' lengths are the config's
  (data.seq_len, inputs_length, targets_length), each shrunk by the stage's factor."""
  shrunk = cfg.copy_and_resolve_references()
  for field in ("seq_len", "inputs_length", "targets_length"):
    shrunk.data[field] = max(1, cfg.data[field] * stage.length // stage.full)
  try:
    for spec in named(shrunk):
      spec.check(shrunk)
  except UserError as e:
    raise UserError(f"data.length_schedule's rows of {stage.length} tokens (from step {stage.step}; every length "
                    f"of the row shrunk by {stage.full // stage.length}): {e}") from None


def _check_eval_objectives(cfg) -> None:
  """data.eval_objectives: tasks of data.source, of objectives whose examples the trained model reads."""
  if cfg.data.eval_objectives and cfg.data.task:
    raise UserError("data.eval_objectives evaluates tasks of data.source; with data.task, leave it empty")
  trained = get(cfg.data.objective).family
  for name in cfg.data.eval_objectives:
    other = get(name).family
    if not other.trains_same_model(trained):
      raise UserError(f"data.eval_objectives names {name!r}, which needs {other.architecture}, but "
                      f"data.objective={cfg.data.objective!r} trains {trained.architecture}; evaluate objectives of "
                      "the trained family")
    check_rows_fit(cfg, get(name), "data.eval_objectives names")


def check_rows_fit(cfg, spec, what: str) -> None:
  """Refuses evaluating the objective `spec` on rows longer than the positions the run's model trains at
  (Family.position_limits): a causal LM's rows of data.seq_len read as a prefix LM's inputs + targets, twice as
  long by default, put the loss at positions the model never saw."""
  trained = run_family(cfg)
  limits = trained.position_limits(cfg.model, trained.task_lengths(cfg.data))
  family = spec.family
  lengths = family.task_lengths(cfg.data)
  for part, length in family.row_lengths(lengths).items():
    side = "encoder" if part == "inputs" or "decoder" not in limits else "decoder"
    if limits[side] is not None and length > limits[side]:
      given = " + ".join(f"data.{key}_length" for key in lengths) if len(lengths) > 1 else "its row"
      raise UserError(f"{what} {spec.name!r}, whose rows of {length} tokens ({given}) are longer than the "
                      f"{limits[side]} positions the run's model trains at, where its loss is not the model's",
                      fix="give lengths that fit the trained rows (e.g. data.inputs_length and data.targets_length "
                          "that sum to data.seq_len)")


def _check_unread(cfg, specs) -> None:
  """Refuses an objective's setting moved from its default where no objective the config names reads it: it
  would change nothing."""
  declared = settings(specs)
  for key in unread_settings(cfg):
    section, field = key.split(".")
    plain = lambda value: json.loads(json.dumps(value))  # A saved config's lists are the default's tuples.
    if field in cfg[section] and plain(cfg[section][field]) != plain(declared[key].default):
      if cfg.data.task:
        raise UserError(f"{key}={cfg[section][field]!r} changes nothing: data.task={cfg.data.task} brings its own "
                        "preprocessors", fix="drop it, or set it in your task")
      readers = [spec.name for spec in specs if key in spec.settings]
      raise UserError(f"{key}={cfg[section][field]!r} is read only by {' and '.join(readers)}, which this config "
                      f"does not train or evaluate (data.objective={cfg.data.objective})",
                      fix="drop it, or choose an objective that reads it")


def check_schedule(cfg) -> schedule_lib.Schedule:
  """The run's schedule (pretrain/data/schedule.py), whose members must train the model of data.objective and
  share its batches: one family's rows, causal-LM rows beside prefix-LM rows of the same length (a CLM row is
  a prefix-LM row without a prefix), or the rows of the families a joint family trains (MLM and contrastive)."""
  plan = schedule_lib.parse(cfg.data)
  if not cfg.data.schedule:
    return plan
  if cfg.data.task or cfg.data.pipeline != "indexed":
    raise UserError("data.schedule draws each row's member by its index: it needs data.pipeline=indexed over "
                    "data.source (not data.task, whose rows seqio draws)")
  run_name = cfg.data.objective
  if run_name not in plan.objectives:
    raise UserError(f"data.objective={run_name!r} is not a member of data.schedule ({', '.join(plan.objectives)}); "
                    "set --config.data.objective to the member whose model the run trains")
  if plan.objectives == (run_name,):
    return plan  # One objective over several sources: a mixture of today's kind, at changing rates.
  features = {}
  for name in plan.objectives:
    family = get(name).family
    features[name] = family.model_lengths(family.task_lengths(cfg.data))
  trained = run_family(cfg)
  for name in plan.objectives:
    family = get(name).family
    if family in trained.joined:
      continue
    if not family.trains_same_model(trained):
      raise UserError(f"data.schedule's {name} trains an {family.name} model and data.objective={run_name!r} an "
                      f"{trained.name} model; a schedule's members train one model")
    if not (family.mixes and trained.mixes):
      raise UserError(f"data.schedule's {name} and {run_name} cannot share batches: "
                      f"{name if not family.mixes else run_name}'s loss has terms of its own; schedule objectives "
                      "whose loss is the token loss, or mlm beside contrastive (one encoder trains both)")
    if not set(features[name]) <= set(features[run_name]):
      widest = next((n for n in plan.objectives if all(set(f) <= set(features[n]) for f in features.values())), "")
      raise UserError(f"data.schedule's {name} makes rows that data.objective={run_name!r}'s model features lack; "
                      + (f"set --config.data.objective={widest}" if widest else "its members cannot share batches"))
    length, run_length = max(features[name].values()), max(features[run_name].values())
    if length != run_length:
      raise UserError(f"data.schedule's {name} makes rows of {length} tokens and {run_name} rows of {run_length}; "
                      "make them equal (data.seq_len = data.inputs_length + data.targets_length for causal and "
                      "prefix LM)")
  return plan
