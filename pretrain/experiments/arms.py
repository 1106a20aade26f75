"""An experiment's runs: each arm (a config) trained with each of its seeds, its figures saved in its workdir, so
that a rerun of the same command resumes what stopped and reads back what finished (and writes the same page).
A workdir holding a run of another config is refused, not trained over: the figures of other settings belong in
another --out_dir."""

import functools
import json
import os
import time

from pretrain import hf, run as run_lib
from pretrain.experiments import runs
from pretrain.system import files
from pretrain.system.errors import UserError
from pretrain.train import goodput
from pretrain.training import train

RESULT = "result.json"  # In each run's workdir: {'key': what made the figures, 'result': the figures}.


def each(configs: dict, seeds, out_dir: str, measure=None, extras=None, dirs=None, said=None) -> dict[str, list]:
  """{arm: [the figures of each of its runs, in seed order]}: every arm of `configs` ({arm: config}) with each of
  its `seeds` (a list, or {arm: list}) in OUT_DIR/DIR/seedS (DIR: dirs[arm], else the arm), one seed of every arm
  before the next seed. A run's figures are measure(arm, config, workdir, wall) (standard_figures, by default)
  with its 'seed', read from its workdir where the same config and extras[arm] (the flags of the measuring) made them;
  said(arm, seed, figures) prints a line after each. Before the first run, every config is checked (built) and
  every workdir that holds a run of another config is refused (refuse_another_run)."""
  for cfg in configs.values():
    run_lib.Run.build(cfg)
  seeds = seeds if isinstance(seeds, dict) else {arm: seeds for arm in configs}
  planned = []  # (arm, seed, its config, its workdir), one seed of every arm before the next seed.
  for seed in sorted({s for arm in configs for s in seeds[arm]}):
    for arm, cfg in configs.items():
      if seed in seeds[arm]:
        seeded = cfg.copy_and_resolve_references()
        seeded.train.seed = seed
        planned.append((arm, seed, seeded, os.path.join(out_dir, (dirs or {}).get(arm, arm), f"seed{seed}")))
  for _, _, cfg, workdir in planned:
    refuse_another_run(cfg, workdir)
  results = {arm: [] for arm in configs}
  for arm, seed, cfg, workdir in planned:
    measured = functools.partial(measure, arm) if measure else None
    results[arm].append(figures(cfg, workdir, measured, (extras or {}).get(arm)))
    if said:
      said(arm, seed, results[arm][-1])
  return results


def refuse_another_run(cfg, workdir: str) -> None:
  """A UserError where `workdir` holds a run of another config than `cfg`, finished or not (its config.json, else
  its result.json: a run whose figures alone are kept, as in git): training `cfg` there would delete it."""
  for name, key_of in (("config.json", _as_trained), (RESULT, _key)):
    path = os.path.join(workdir, name)
    if not os.path.exists(path):
      continue
    with open(path) as f:
      saved = json.load(f)
    ours = key_of(cfg)
    theirs = runs.config_key(saved if name != RESULT else saved["key"])
    ours, theirs = _flat(ours), _flat({s: theirs[s] for s in theirs if s in ours})  # A result's key: + measuring flags.
    differ = [f"{k} {theirs.get(k)!r} there, {ours.get(k)!r} here" for k in sorted({*ours, *theirs})
              if theirs.get(k) != ours.get(k)]
    if differ:
      raise UserError(f"{workdir} holds a run of another config ({'; '.join(differ[:3])}"
                      + (f" and {len(differ) - 3} more" if len(differ) > 3 else "") + ")",
                      fix="rerun with its settings to read it back, give another --out_dir for these runs, or "
                          "delete that folder to train it again")
    return


def _flat(key: dict) -> dict:
  """{'section.field': value} of a config key."""
  return {f"{section}.{field}": value for section, fields in key.items() for field, value in fields.items()}


def _key(cfg) -> dict:
  return runs.config_key(json.loads(cfg.to_json_best_effort()))


def _as_trained(cfg) -> dict:
  """The key of `cfg` as training writes it to config.json: train.init_from_hf takes the model's shape and
  tokenizer from the Hugging Face directory."""
  return _key(hf.import_config(cfg, cfg.train.init_from_hf) if cfg.train.init_from_hf else cfg)


def machine(results: dict[str, list]) -> str:
  """The machine the first run trained on, as its page says it (runs.machine()), or this one's if none did."""
  return next((r["machine"] for seeds in results.values() for r in seeds if "machine" in r), None) or runs.machine()


def figures(cfg, workdir: str, measure=None, extra: dict | None = None) -> dict:
  """A run's figures: read from workdir/result.json where the same config and `extra` made them, else trained
  (resumed from the checkpoint of a run of the same config; a run of another config there is refused), measured
  and saved there, with the machine it trained on ('machine')."""
  key = runs.config_key({**_key(cfg), **(extra or {})})
  path = os.path.join(workdir, RESULT)
  if os.path.exists(path):
    with open(path) as f:
      saved = json.load(f)
    if runs.config_key(saved["key"]) == key:
      return saved["result"]
  refuse_another_run(cfg, workdir)
  trained_on = runs.machine()
  wall = _trained(cfg, workdir)
  try:
    result = {**(measure or standard_figures)(cfg, workdir, wall), "seed": cfg.train.seed, "machine": trained_on}
  except BaseException:
    print(f"Measuring the run in {workdir} failed", flush=True)
    raise
  files.write_atomically(path, json.dumps({"key": key, "result": result}).encode())
  return result


def _trained(cfg, workdir: str) -> float:
  """Trains `cfg` in `workdir` (its console output to workdir/train.log) and returns the wall seconds of its
  attempts: a stopped run of the same config resumes from its last checkpoint; one that saved none starts over."""
  config_file, checkpoints = os.path.join(workdir, "config.json"), os.path.join(workdir, "checkpoints")
  resumable = False
  if os.path.exists(config_file) and os.path.isdir(checkpoints) and any(n.isdigit() for n in os.listdir(checkpoints)):
    with open(config_file) as f:
      resumable = runs.config_key(json.load(f)) == _as_trained(cfg)
  earlier = sum(a["updated"] - a["started"] for a in (goodput.read(workdir) or {}).get("attempts", ())) \
      if resumable else 0.0
  if not resumable:
    runs.fresh_workdir(workdir)
  log = os.path.join(workdir, "train.log")
  try:
    with runs.output_to(log):
      start = time.perf_counter()
      summary = train(cfg, workdir)
      wall = time.perf_counter() - start
  except BaseException:
    print(f"The run in {workdir} failed; its output is in {log}", flush=True)
    raise
  if summary.get("stopped_by"):
    raise UserError(f"the run in {workdir} was interrupted; rerun the same command to resume it")
  return earlier + wall


def standard_figures(cfg, workdir: str, wall: float) -> dict:
  """runs.measure's figures, of the config that trained (train.init_from_hf may have changed it), built again
  without writing to the workdir."""
  del cfg
  return runs.measure(run_lib.Run.build_with_data(run_lib.saved_config(workdir)), workdir, wall)
