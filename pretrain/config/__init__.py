"""Run configuration: ml_collections config files, dotted-key overrides, checks (the fields themselves, their
defaults, valid values and help: schema.py).

A run is described by a Python file whose `get_config()` returns a ConfigDict
(see configs/quickstart.py; pretrain.configs.load finds a built-in one by
name). Any field can be overridden on the command line
with `--config.SECTION.FIELD=VALUE`; the value is parsed to the field's type.
Every front-end (command line, gin files, the config zoo) sets a field through
`set_value`; they import this module, never the reverse (pretrain.cli joins
them for the commands).
"""

import functools
import math
import operator

import ml_collections

from pretrain.config import rules, schema
from pretrain.config.files import (NEWER_FIELDS, check_types, load_config_file, load_module, to_json,
                                   with_newer_fields)
from pretrain.config.keys import (apply_overrides, flat_keys, get, override, parse_overrides, set_value, update,
                                  value)
from pretrain.config.rules import check_with_family, wsd_decay_steps
# The valid-value helpers, for the objectives and config files that declare settings (config.POSITIVE, ...).
from pretrain.config.schema import BELOW_ONE, FRACTION, NOT_NEGATIVE, OPEN_FRACTION, POSITIVE, Valid, one_of

__all__ = ["BELOW_ONE", "FRACTION", "NEWER_FIELDS", "NOT_NEGATIVE", "OPEN_FRACTION", "POSITIVE", "RANGES", "Valid",
           "apply_overrides", "check_types", "check_with_family", "flat_keys", "get", "load_config_file",
           "load_module", "one_of", "override", "parse_overrides", "rules", "schema", "set_value", "to_json",
           "update", "validate", "value", "with_newer_fields", "wsd_decay_steps"]


# The valid values of every checked field, declared once with its default and help (schema.py). Fields that only
# some families use are checked here too when their range never depends on the family; the rules between fields,
# also those that depend on the family, are rules.py's; an objective's own settings are declared, with their
# defaults and ranges, in its module (pretrain/objectives/).
RANGES = schema.ranges()


def validate(cfg: ml_collections.ConfigDict, more: dict[str, Valid] | None = None) -> None:
  """Checks that every number is finite, every field of RANGES (and of `more`: the objectives' settings,
  pretrain.objectives.validate) and the rules between fields (rules.check), before anything is built."""
  for key in flat_keys(cfg):
    value = functools.reduce(operator.getitem, key.split("."), cfg)
    rules.require(not isinstance(value, float) or math.isfinite(value),
                  f"{key} must be a finite number, got {value!r}; set --config.{key} to one")
  for key, valid in {**RANGES, **(more or {})}.items():
    section, name = key.split(".")
    value = cfg[section][name]
    rules.require(valid.test(value), f"{key} must be {valid.what}, got {value!r}; set --config.{key} to such a value")
  rules.check(cfg)
