"""Evaluates the latest checkpoint of a run on a task.

  pretrain eval --workdir=runs/quickstart --task=corpus_clm [--split=validation] [--batches=N]

Reports loss (per target token), token accuracy and perplexity, and writes
them to WORKDIR/eval/TASK-SPLIT-stepN.json. A task is `{source}_{objective}`
over the run's data source (e.g. corpus_prefix_lm_decoder), for any objective
of the run's model family.
"""

import argparse
import itertools
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pretrain.errors import UserError, exit_on_user_error  # pylint: disable=g-import-not-at-top


def evaluate(workdir: str, task: str, split: str, max_batches: int = 0) -> dict:
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from pretrain import files  # pylint: disable=g-import-not-at-top
  from pretrain.data import objectives, pipeline, sources, tasks  # pylint: disable=g-import-not-at-top
  from pretrain.parallel import mesh as mesh_lib  # pylint: disable=g-import-not-at-top
  from pretrain.train import loop, restore, steps  # pylint: disable=g-import-not-at-top

  run = restore.load(workdir)
  members = sources.mixture_sources(run.cfg.data)
  family = loop._FAMILIES[run.objective.converter]  # pylint: disable=protected-access
  available = {}
  for name in objectives.NAMES:
    objective = objectives.make(name, run.cfg.data, run.cfg.train.seed)
    if loop._FAMILIES[objective.converter] == family:  # pylint: disable=protected-access
      available[tasks.register_mixture(members, run.vocabulary, objective)] = objective
  if task not in available:
    raise UserError(f"--task={task!r} is not a task this {family} run can be evaluated on; use one of "
                    f"{', '.join(sorted(available))}")
  objective = available[task]
  mesh, rules = mesh_lib.make_mesh(run.cfg.mesh), mesh_lib.rules(run.cfg.mesh)
  rows = run.cfg.train.batch_size
  local = pipeline.batches(task, split, pipeline.feature_lengths(run.cfg.data, objective), rows, objective.converter,
                           shuffle=False, seed=run.cfg.train.seed, repeat=False,
                           host_sharding=run.cfg.data.get("host_sharding", "source"))
  if max_batches:
    local = itertools.islice(local, max_batches)
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    batch_sharding = mesh_lib.batch_sharding(mesh, rules)
    eval_step = jax.jit(steps.make_eval_step(run.model))
    batches = [mesh_lib.global_batch(b, batch_sharding) for b in local]
    if not batches:
      raise UserError(f"the {split} split of {task} holds less than one batch of {rows} sequences")
    result = loop.evaluate(eval_step, run.params, batches)
  summary = {"task": task, "split": split, "step": run.step, "batches": len(batches),
             "loss": result["eval/loss"], "accuracy": result["eval/accuracy"], "perplexity": result["eval/perplexity"]}
  if jax.process_index() == 0:
    files.write_atomically(os.path.join(workdir, "eval", f"{task}-{split}-step{run.step}.json"),
                           json.dumps(summary, indent=2).encode())
  return summary


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain eval") -> None:
  parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--workdir", required=True, help="a run of python -m pretrain.train")
  parser.add_argument("--task", required=True, help="e.g. corpus_clm; an unknown name lists the valid ones")
  parser.add_argument("--split", default="validation", help="train or validation")
  parser.add_argument("--batches", type=int, default=0, help="at most this many batches (0: the whole split)")
  args = parser.parse_args(argv)
  s = evaluate(args.workdir, args.task, args.split, args.batches)
  print(f"{s['task']} ({s['split']}, step {s['step']}, {s['batches']} batches): loss {s['loss']:.4f}, "
        f"accuracy {s['accuracy']:.4f}, perplexity {s['perplexity']:.2f}")


if __name__ == "__main__":
  main(sys.argv[1:])
