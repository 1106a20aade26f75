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

from pretrain.objectives.checks import check_mode, check_rows_fit, check_schedule, refuse_unknown_keys, validate
from pretrain.objectives.registry import (BUILT_IN, NAMES, NAMING_KEYS, get, known, make, named, pieces, run_family,
                                          settings, unread_settings, with_absolute_files, with_settings)
from pretrain.objectives.spec import Objective, Setting
from pretrain.objectives.user import FileMissing

__all__ = ["BUILT_IN", "FileMissing", "NAMES", "NAMING_KEYS", "Objective", "Setting", "check_mode", "check_rows_fit",
           "check_schedule", "get", "known", "make", "named", "pieces", "refuse_unknown_keys", "run_family", "settings",
           "unread_settings", "validate", "with_absolute_files", "with_settings"]
