"""The pre-training objectives, one module each (see spec.py for what a module declares), and their registry.

BUILT_IN lists the project's objectives. `data.objective=MODULE:CLASS` (or
`FILE.py:CLASS`) names one of a user's own, a subclass of Objective in a
module outside the package; it trains, evaluates, inspects, resumes and goes
into mixtures as a built-in one does. The rest of the project knows the
objectives only through here: a run's model family, the config settings the
objectives declare (their defaults and valid values), their checks, the tasks
that `inspect-task` and `eval` offer, and the vocabulary's special pieces.

Importing this package does not import TensorFlow (the objectives' data code
loads it on first use), so the model side of a run works without it.
"""

import difflib
import functools
import importlib
import json
import os
import re
import traceback

from pretrain import config as config_lib, vocab
from pretrain.data import schedule as schedule_lib
from pretrain.families import Family
from pretrain.system import tf_loader
from pretrain.objectives import bart
from pretrain.objectives import clm
from pretrain.objectives import contrastive
from pretrain.objectives import electra
from pretrain.objectives import fim
from pretrain.objectives import mass
from pretrain.objectives import mlm
from pretrain.objectives import prefix_lm
from pretrain.objectives import sentence_pairs
from pretrain.objectives import span_corruption
from pretrain.objectives import ul2
from pretrain.objectives.spec import Objective, Setting
from pretrain.system.errors import UserError

# One line per objective. The special pieces of the vocabulary are theirs in this order (a new objective's go
# after those above it; the vocabulary's cache key includes them).
BUILT_IN = {spec.name: spec for spec in (
    clm.CLM,
    span_corruption.T5SpanCorruption,
    prefix_lm.PrefixLM,
    prefix_lm.PrefixLMDecoder,
    ul2.UL2,
    ul2.UL2Decoder,
    fim.FIM,
    mlm.MLM,
    bart.Bart,
    sentence_pairs.NSP,
    sentence_pairs.SOP,
    electra.Electra,
    contrastive.Contrastive,
    mass.MASS,
)}
NAMES = tuple(BUILT_IN)
# The config fields that name objectives: set first, so that a user's objective brings its settings in time.
NAMING_KEYS = ("data.objective", "data.eval_objectives")


def get(name: str) -> type[Objective]:
  """The objective class of a name: a built-in one, or MODULE:CLASS / FILE.py:CLASS."""
  if name in BUILT_IN:
    return BUILT_IN[name]
  if ":" in name:
    return _user_objective(name)
  nearest = difflib.get_close_matches(name, NAMES, n=1, cutoff=0.0)[0]
  raise UserError(f"unknown objective {name!r}; did you mean {nearest!r}? (the built-in objectives are "
                  f"{', '.join(NAMES)}; MODULE:CLASS or FILE.py:CLASS names one of your own)")


def make(name: str, data_cfg, seed: int) -> Objective:
  """The objective `name` with the run's data settings (the `data` config) and seed."""
  return get(name)(data_cfg, seed)


@functools.cache
def _user_objective(reference: str) -> type[Objective]:
  where, _, attribute = reference.rpartition(":")
  what = f"the objective {reference!r}"
  tf_loader.tensorflow()  # First and quietly: a user's module may import TensorFlow (an objective's code runs on it).
  if where.endswith(".py"):
    if not os.path.isfile(where):
      raise UserError(f"{what}: the file {where!r} does not exist; give FILE.py:CLASS or MODULE:CLASS")
    module = config_lib.load_module(where, f"_pretrain_objective_{os.path.splitext(os.path.basename(where))[0]}",
                                    what="objective file")
  else:
    try:
      module = importlib.import_module(where)
    except ImportError as e:
      raise UserError(f"{what}: the module {where!r} cannot be imported ({e}); give an importable MODULE:CLASS or "
                      "FILE.py:CLASS") from None
  spec = getattr(module, attribute, None)
  if not (isinstance(spec, type) and issubclass(spec, Objective)):
    raise UserError(f"{what}: {where} has no subclass of pretrain.objectives.Objective named {attribute!r}")
  if not spec.name or not isinstance(spec.family, Family) or spec.preprocess is Objective.preprocess:
    raise UserError(f"{what} must set `name` and `family` (e.g. pretrain.families.CAUSAL_LM) and define "
                    "preprocess(); see the README's 'Your own objective'")
  if spec.name in BUILT_IN:
    raise UserError(f"{what} is named {spec.name!r}, as a built-in objective; give it a name of its own")
  for key in spec.settings:
    if key.count(".") != 1 or key.split(".")[0] not in ("data", "model", "loss"):
      raise UserError(f"{what} declares the setting {key!r}; name settings data.NAME, model.NAME or loss.NAME")
  return _guarded(spec, what, getattr(module, "__file__", None) or where)


def _guarded(spec: type[Objective], what: str, path: str) -> type[Objective]:
  """`spec` whose preprocess, where it raises (as the data pipeline is built: tf.data traces the functions it maps
  then), ends in one line naming the user's file, line and exception, not TensorFlow's and seqio's traceback
  (which --verbose prints first)."""

  def preprocess(self, dataset, sequence_length, output_features):
    try:
      return spec.preprocess(self, dataset, sequence_length, output_features)
    except UserError:
      raise
    except Exception as e:  # pylint: disable=broad-except  (any error of the user's code)
      if not tf_loader.quiet:
        traceback.print_exc()
      raise UserError(f"{what}: its preprocess raised {_user_failure(e, path)}"
                      + (" (--verbose shows the traceback)" if tf_loader.quiet else "")) from None

  return type(spec.__name__, (spec,), {"preprocess": preprocess, "__module__": spec.__module__,
                                       "__qualname__": spec.__qualname__, "__doc__": spec.__doc__})


def _user_failure(error: Exception, path: str) -> str:
  """'TYPE: message at FILE:LINE' of an exception raised in the user's file `path` (AutoGraph, which converts the
  functions tf.data maps, names the user's line in its message rather than in the traceback)."""
  text = str(error).strip()
  places = [(frame.filename, frame.lineno) for frame in traceback.extract_tb(error.__traceback__)]
  places += [(f, int(n)) for f, n in re.findall(r'File "([^"]+)", line (\d+)', text)]  # Deeper: where it raised.
  mine = [(f, n) for f, n in places if os.path.abspath(f) == os.path.abspath(path)]
  last = text.splitlines()[-1].strip() if text else ""
  message = last if last.startswith(f"{type(error).__name__}:") else f"{type(error).__name__}: {last}".rstrip(": ")
  return message + (f" at {mine[-1][0]}:{mine[-1][1]}" if mine else "")


def named(cfg) -> list[type[Objective]]:
  """The objectives a config names: data.objective, data.eval_objectives, then those of data.schedule."""
  scheduled = schedule_lib.parse(cfg.data).objectives if cfg.data.get("schedule") else ()
  return list(dict.fromkeys(get(name) for name in (cfg.data.objective, *cfg.data.eval_objectives, *scheduled)))


def known(cfg=None) -> list[type[Objective]]:
  """The built-in objectives, then those of a user's that `cfg` names."""
  return list(dict.fromkeys([*BUILT_IN.values(), *(named(cfg) if cfg is not None else [])]))


def settings(specs) -> dict[str, Setting]:
  """The config settings the objectives declare (one setting may be shared: MLM's rate by NSP, SOP, ELECTRA)."""
  merged = {}
  for spec in specs:
    for key, setting in spec.settings.items():
      if key in merged and merged[key].default != setting.default:
        raise UserError(f"the objective {spec.name!r} declares {key} with the default {setting.default!r}, but "
                        f"another objective declares it with {merged[key].default!r}; give it a name of its own")
      merged.setdefault(key, setting)
  return merged


def unread_settings(cfg) -> list[str]:
  """The objectives' settings (data.mlm_rate, ...) that no objective `cfg` names reads: every one where a user's
  seqio task (data.task) brings its own preprocessors."""
  read = set() if cfg.data.task else {key for spec in named(cfg) for key in spec.settings}
  return [key for key in settings(known(cfg)) if key not in read]


def _check_unread(cfg, specs) -> None:
  """Refuses an objective's setting moved from its default where no objective the config names reads it: it
  would change nothing."""
  declared = settings(specs)
  for key in unread_settings(cfg):
    section, field = key.split(".")
    plain = lambda value: json.loads(json.dumps(value))  # A saved config's lists are the default's tuples.
    if field in cfg[section] and plain(cfg[section][field]) != plain(declared[key].default):
      readers = [spec.name for spec in specs if key in spec.settings]
      raise UserError(f"{key}={cfg[section][field]!r} is read only by {' and '.join(readers)}, which this config "
                      f"does not train or evaluate (data.objective={cfg.data.objective})",
                      fix="drop it, or choose an objective that reads it")


def with_settings(cfg):
  """`cfg` with every setting of the objectives it may use (the built-in ones and those it names) that it lacks,
  at its default: a config file declares only what it changes, and a config.json written before a setting
  existed reads as if it held the default. Returns `cfg`."""
  for key, setting in settings(known(cfg)).items():
    section, field = key.split(".")
    if field not in cfg[section]:
      with cfg.unlocked():
        cfg[section][field] = setting.default
  return cfg


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
    _check_unread(cfg, specs)  # (A user's task reads none of them.)
  check_schedule(cfg)
  family = run_family(cfg)
  config_lib.check_with_family(cfg, family)
  _check_eval_objectives(cfg)
  if schedule_lib.length_stages(cfg.data, family.task_lengths(cfg.data), cfg.train.batch_size)[1:] and (
      cfg.data.task or cfg.data.pipeline != "indexed"):
    raise UserError("data.length_schedule packs rows of each length from the token store: it needs "
                    "data.pipeline=indexed over data.source (not data.task)")
  if not (cfg.tokenizer.path or cfg.data.task or cfg.train.init_from_hf):  # Else the vocabulary is given.
    vocab.check_size(cfg.tokenizer.kind, cfg.tokenizer.vocab_size, cfg.tokenizer.extra_ids, pieces(cfg))


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


def run_family(cfg) -> Family:
  """The family that trains a run: data.objective's, or the joint family its schedule's members need (rows of an
  objective whose loss has terms of its own beside another's: Family.joint)."""
  own = get(cfg.data.objective).family
  if not cfg.data.get("schedule"):
    return own
  member_families = [get(member.objective).family for member in schedule_lib.parse(cfg.data).members]
  joints = (family.joint(member_families) for family in dict.fromkeys(member_families))
  return next((joint for joint in joints if joint is not None), own)


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


def pieces(cfg=None) -> tuple[str, ...]:
  """The vocabulary's special pieces: the built-in objectives', then those of a user's objective `cfg` names."""
  return tuple(dict.fromkeys(piece for spec in known(cfg) for piece in spec.pieces))
