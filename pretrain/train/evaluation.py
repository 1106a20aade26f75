"""Validation loss, token accuracy and perplexity of parameters on fixed batches."""

import collections
import itertools

import jax
from jax.experimental import multihost_utils
import numpy as np

from pretrain.parallel import mesh as mesh_lib
from pretrain.system.errors import UserError


def sums(eval_step, params, eval_batches) -> dict:
  """The eval step's sums over the batches (cross_entropy in nats, weight: the loss-bearing tokens, ...)."""
  totals = collections.defaultdict(float)
  for batch in eval_batches:
    for key, value in jax.device_get(eval_step(params, batch)).items():
      totals[key] = totals[key] + (float(value) if np.ndim(value) == 0 else np.asarray(value, np.float64))
  return totals


def evaluate(family, eval_step, params, eval_batches) -> dict[str, float]:
  """The family's validation metrics (eval/loss, ...) over the batches."""
  return {f"eval/{k}": v for k, v in family.eval_metrics(sums(eval_step, params, eval_batches)).items()}


def global_batches(run, task: str, objective, split: str, max_batches: int | None) -> list:
  """Up to `max_batches` (None: all) global batches of a split of `task`, read once."""
  local = list(itertools.islice(run.batches(split, task, objective, shuffle=False, repeat=False, whole=True),
                                max_batches))
  if run.family.rows_named:  # A joint family's rows say their member: here all are of `objective`'s.
    member = next(i for i, m in enumerate(run.schedule.members) if m.objective == objective.name)
    local = [{**b, "member": np.full_like(run.family.targets_and_weights(b)[0], member)} for b in local]
  # Each evaluation step is a collective of every process, and a host's share of a small split may end a batch
  # sooner than another's: all take as many batches as the most, the missing ones empty (no tokens, no loss).
  counts = multihost_utils.process_allgather(np.int32(len(local))) if jax.process_count() > 1 else [len(local)]
  if not min(counts):  # The last rows of a split fill a padded batch: only a split (or share) without any stops.
    raise UserError(f"the {split} split of {task} yields no examples" + (
        " for some of the processes: each reads its share of the split's documents, and a split of fewer documents "
        "than processes leaves some without; add documents to it" if max(counts) else
        "; add documents to it (a files source without data.validation_files holds out a share of the train "
        "documents: name held-out files there)"))
  local += [{k: np.zeros_like(v) for k, v in local[0].items()}] * (int(max(counts)) - len(local))
  return [mesh_lib.global_batch(b, run.batch_sharding) for b in local]


def eval_sets(run) -> dict[str, list]:
  """Validation batches by metric prefix: 'eval' for the trained task, 'eval/TASK' for each extra one."""
  return {prefix: global_batches(run, task, objective, "validation", run.cfg.train.eval_batches)
          for prefix, task, objective in [("eval", run.task, run.objective),
                                          *((f"eval/{t}", t, o) for t, o in run.eval_tasks.items())]}


def evaluate_all(run, params, sets) -> dict[str, float]:
  results = {}
  for prefix, batches in sets.items():
    results.update({f"{prefix}/{k.split('/', 1)[1]}": v
                    for k, v in evaluate(run.family, run.eval_step, params, batches).items()})
  return results
