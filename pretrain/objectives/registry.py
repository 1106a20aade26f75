"""The objectives by name: the built-in ones (one line each) and a user's; those a config names, the settings
they declare, the family that trains a run and the vocabulary's special pieces they need."""

import difflib

from pretrain.data import schedule as schedule_lib
from pretrain.families import Family
from pretrain.objectives import (bart, clm, contrastive, electra, fim, mass, mlm, prefix_lm, sentence_pairs,
                                 span_corruption, ul2, user)
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
    return user.load(name, NAMES)
  nearest = difflib.get_close_matches(name, NAMES, n=1, cutoff=0.0)[0]
  raise UserError(f"unknown objective {name!r}; did you mean {nearest!r}? (the built-in objectives are "
                  f"{', '.join(NAMES)}; MODULE:CLASS or FILE.py:CLASS names one of your own)")


def make(name: str, data_cfg, seed: int) -> Objective:
  """The objective `name` with the run's data settings (the `data` config) and seed."""
  return get(name)(data_cfg, seed)


def with_absolute_files(cfg):
  """`cfg` with the FILE.py:CLASS objectives of data.objective, data.eval_objectives and data.schedule's members
  named by absolute paths (user.absolute). Returns `cfg`."""
  data = cfg.data
  data.objective = user.absolute(data.objective)
  data.eval_objectives = tuple(user.absolute(name) for name in data.eval_objectives)
  if data.get("schedule") and all(isinstance(stage, (tuple, list)) and len(stage) >= 2 and
                                  isinstance(stage[1], (tuple, list)) for stage in data.schedule):
    data.schedule = tuple((stage[0], tuple(tuple((user.absolute(member[0]), *member[1:]))
                                           if isinstance(member, (tuple, list)) and member else member
                                           for member in stage[1]), *stage[2:]) for stage in data.schedule)
  return cfg


def named(cfg) -> list[type[Objective]]:
  """The objectives a config names: data.objective, data.eval_objectives, then those of data.schedule."""
  objective, *scheduled = trained(cfg)
  return list(dict.fromkeys(get(name) for name in (objective, *cfg.data.eval_objectives, *scheduled)))


def trained(cfg) -> list[str]:
  """The names of the objectives a config trains: data.objective, then those of data.schedule, each once."""
  scheduled = schedule_lib.parse(cfg.data).objectives if cfg.data.get("schedule") else ()
  return list(dict.fromkeys((cfg.data.objective, *scheduled)))


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


def run_family(cfg) -> Family:
  """The family that trains a run: data.objective's, or the joint family its schedule's members need (rows of an
  objective whose loss has terms of its own beside another's: Family.joint)."""
  own = get(cfg.data.objective).family
  if not cfg.data.get("schedule"):
    return own
  member_families = [get(member.objective).family for member in schedule_lib.parse(cfg.data).members]
  joints = (family.joint(member_families) for family in dict.fromkeys(member_families))
  return next((joint for joint in joints if joint is not None), own)


def pieces(cfg=None) -> tuple[str, ...]:
  """The vocabulary's special pieces: the built-in objectives', then those of a user's objective `cfg` names."""
  return tuple(dict.fromkeys(piece for spec in known(cfg) for piece in spec.pieces))
