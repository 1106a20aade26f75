"""Trains a grid of config overrides over one base config, a workdir per point, and reports the points' final
metrics, grouped over seeds with their 95% intervals.

  pretrain sweep --workdir=sweeps/mlm_rate --config.data.objective=mlm \\
      --grid.data.mlm_rate=0.1,0.15,0.3 --grid.train.seed=0,1 [--probe=same_document] [--metric=eval/loss]
  pretrain sweep --workdir=sweeps/mlm_rate --report [--metric=probe/same_document_probe]
  pretrain sweep --workdir=sweeps/mlm_rate --launch="slurm --nodes=1 --gpus_per_node=8" ... [--run]

--grid.KEY=V1,V2 (repeatable) gives a config field's values; the points are
every combination, each trained in WORKDIR/NAME (e.g. mlm_rate=0.1,seed=0)
with the base flags (--config, --gin_file, --gin_search_paths, --config.KEY=VALUE) plus its
values. The points run one after another in this process, their console
output in NAME/train.log (appended to, each attempt from a line that marks
it). A finished point is not run again and an interrupted one resumes, so a
killed sweep rerun (the same command) continues. Axes named *seed are
repeats: the report (WORKDIR/sweep.md, sweep.csv, sweep.png), written after
each point that finishes (marked partial until all have), gives each setting
of the others the mean and 95% interval over them
(pretrain/downstream/stats.py: the run is the unit; settings compare paired
over their shared seeds, Holm-corrected).
--probe measures each point's final parameters downstream (pretrain
probe), beside its initial ones. --launch hands each
point to `pretrain launch` instead (printed, or submitted with --run); run
--report when the jobs are done.

Layout: The sweep's directory holds sweep.json (the base flags and the grid: what a rerun must match), a directory
per point named by its values (e.g. `mlm_rate=0.15,seed=0`), and the report: sweep.csv (a row per point),
sweep.md (a row per setting, the mean and 95% interval over the seed axes) and sweep.png (one metric against
the first swept setting that is not a seed).
"""

import argparse
import os
import shlex
import sys

from pretrain import cli, config as config_lib
from pretrain.commands import probe as probe_command
from pretrain.commands import launch
from pretrain.experiments import sweep_grid
from pretrain.parallel import mesh
from pretrain.system import aside, files
from pretrain.system.errors import UserError, exit_on_user_error

BASE_FLAGS = ("--config", "--gin_file", "--gin_search_paths", "--config.", "--gin.")


def _base(rest: list[str]) -> list[str]:
  """The base config flags among a command line's (those every point shares), each as FLAG=VALUE (train takes
  `--config X` and `--config.KEY VALUE` too); anything else is an error."""
  base, unknown, i = [], [], 0
  while i < len(rest):
    arg, i = rest[i], i + 1
    if not arg.startswith(BASE_FLAGS):
      unknown.append(arg)
    elif "=" in arg or arg.startswith("--gin.") or i == len(rest) or rest[i].startswith("--"):
      base.append(arg)
    else:
      base.append(f"{arg}={rest[i]}")
      i += 1
  if unknown:
    raise UserError(f"unknown arguments {unknown}; see pretrain sweep --help (config fields: --config.KEY=VALUE, "
                    "swept ones: --grid.KEY=V1,V2)")
  return base


def _point_config(base: list[str], settings: dict[str, str]):
  """A point's config: the base flags, then its values as --config overrides; checked as train checks it."""
  return cli.parse_command_line(argparse.ArgumentParser(add_help=False),
                                [*base, *(f"--config.{k}={v}" for k, v in settings.items())])[1]


def _grid_point(base: list[str], name: str, settings: dict[str, str]):
  """_point_config of a point of the grid; a value the config refuses is named as the --grid flag it came in."""
  try:
    return _point_config(base, settings)
  except UserError as e:
    message = str(e)
    for key in settings:
      message = message.replace(f"--config.{key}", f"--grid.{key}")
    raise UserError(f"point {name}: {message}") from None


class Interrupted(UserError):
  """A stop request (Ctrl-C, SIGTERM) while a point trained: it ends the sweep, unlike a point that fails."""


def _train_point(cfg, workdir: str, trained: bool, probe: str | None, probe_seeds: int) -> None:
  """Trains (or resumes) the point's run unless `trained`, then probes it if asked."""
  from pretrain.training import train  # pylint: disable=g-import-not-at-top  (not for --help)
  # pylint: disable-next=g-import-not-at-top  (not for --help)
  from pretrain.experiments import runs, sweep_report as report_lib
  os.makedirs(workdir, exist_ok=True)
  with runs.output_to(os.path.join(workdir, "train.log" if not trained else "probe.log")):
    if not trained and train(cfg, workdir).get("stopped_by"):
      raise Interrupted(f"the sweep was interrupted in {workdir}; rerun its command to continue")
    if probe:
      results = report_lib.probe_file(workdir, probe, cfg.train.steps)
      if os.path.lexists(results):  # There, but not a probe's results (probed() said so): kept aside.
        aside.move(results, "is not a probe's results", "the point is probed again")
      seeds = [f"--seeds={probe_seeds}"] if probe == "same_document" else []  # The others draw nothing.
      probe_command.main([f"--workdir={workdir}", f"--task={probe}", *seeds])


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain sweep") -> None:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--workdir", required=True, help="the sweep's directory: a workdir per point and the report")
  parser.add_argument("--report", action="store_true", help="only write the report of the points finished so far")
  parser.add_argument("--metric", default="eval/loss", help="the metric the plot shows and the verdict compares "
                                                             "(any column of sweep.csv)")
  parser.add_argument("--probe", choices=("zero_shot", "same_document", "packages"), default=None,
                      help="also measure each point downstream (pretrain probe --task=PROBE) when it finishes")
  parser.add_argument("--probe_seeds", type=cli.at_least(1), default=3,
                      help="the same-document probe's seeds (the other probes draw nothing)")
  parser.add_argument("--launch", default=None, help="hand each point to `pretrain launch` with these flags, "
                                                     "e.g. \"slurm --nodes=1 --gpus_per_node=8\"")
  parser.add_argument("--run", action="store_true", help="with --launch: submit, not only print")
  grid, rest = sweep_grid.parse_grid(argv)
  args, rest = parser.parse_known_args(rest)
  base = _base(rest)
  command = shlex.join(["pretrain", "sweep", *argv])
  if args.report:
    if grid or base:
      raise UserError("--report reads the sweep in --workdir as it was run; give no --grid or config flags")
    _report(args, command)
    return
  if not grid:
    raise UserError("give the swept fields as --grid.KEY=V1,V2 (e.g. --grid.data.mlm_rate=0.1,0.15,0.3)")
  if args.launch and args.probe:
    raise UserError("--probe measures the points that train here; with --launch, probe each finished point with "
                    "pretrain probe --workdir=POINT --task=TASK, then run --report")
  base_config = _point_config(base, {})
  for key in grid:  # A mistyped key is named as the --grid flag it came in.
    config_lib.get(base_config, key, prefix=sweep_grid.GRID_PREFIX)
    if any(flag.startswith(f"--config.{key}=") or flag == f"--config.{key}" for flag in base):
      raise UserError(f"--config.{key} and --grid.{key} both set {key}; the grid's values would replace the "
                      "other's: give one of them")
  grid = sweep_grid.in_saved_order(args.workdir, grid)
  points = sweep_grid.point_names(grid)
  configs = {name: _grid_point(base, name, settings) for name, settings in points}  # Every point checked first.
  sweep_grid.same_configs(configs)
  if not args.launch:  # The points train here: each one's mesh over this machine's devices, before any trains.
    import jax  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
    for name, cfg in configs.items():
      try:
        mesh.mesh_shape(cfg.mesh, jax.device_count())
      except UserError as e:
        raise UserError(f"point {name}: {e}") from None
  sweep_grid.check_manifest(args.workdir, base, grid, resolve=lambda flags: _point_config(flags, {}))
  if args.launch:
    _launch(args, base, points)
    return
  from pretrain.experiments import sweep_report as report_lib  # pylint: disable=g-import-not-at-top  (not for --help)
  failed = {}
  for i, (name, settings) in enumerate(points):
    workdir, cfg = os.path.join(args.workdir, name), configs[name]
    trained = report_lib.final_record(workdir, cfg.train.steps) is not None
    if trained and (not args.probe or report_lib.probed(workdir, args.probe, cfg.train.steps)):
      print(f"[{i + 1}/{len(points)}] {name}: finished before")
      continue
    print(f"[{i + 1}/{len(points)}] {name}: {'probing' if trained else 'training'} ({workdir})", flush=True)
    try:
      _train_point(cfg, workdir, trained, args.probe, args.probe_seeds)
    except Interrupted:
      raise
    except UserError as e:  # A point's failure (a learning rate that diverges, say) is its result: go on.
      # Its problem only: what a run's failure says to do (change a setting, rerun to resume) the sweep says
      # its own way in its last line, where a point's settings are the grid's.
      failed[name] = e.problem.split(". ")[0]
      print(f"[{i + 1}/{len(points)}] {name}: failed: {e.problem}", flush=True)
      continue
    if i + 1 < len(points):  # The report so far, to look at while the rest train.
      _report(args, command, configs, show=False)
      print(f"[{i + 1}/{len(points)}] {name}: finished; the report so far: "
            f"{os.path.join(args.workdir, 'sweep.md')}", flush=True)
  if len(failed) < len(points):
    _report(args, command, configs)
  if failed:
    reasons = "; ".join(f"{n}: {why}" for n, why in failed.items())
    raise UserError(f"{len(failed)} of {len(points)} points failed ({reasons}); the report covers the others. To "
                    "retry them as they are, rerun this command (finished points are kept); to try other settings (a "
                    "lower learning rate), sweep them in a new --workdir")


def seeded(workdir: str, flags: list[str], seeds: list[int]) -> tuple[list[dict], list[str]]:
  """(each seed's runs.measure(), the sweep's flags) of one config trained once per seed by a sweep in `workdir` (a
  point per seed, WORKDIR/seed=S; a rerun continues an interrupted sweep and reads finished points back): how the
  experiments replicate a run."""
  from pretrain import run as run_lib  # pylint: disable=g-import-not-at-top  (not for --help)
  from pretrain.experiments import runs  # pylint: disable=g-import-not-at-top  (not for --help)
  argv = [f"--workdir={workdir}", *flags, f"--grid.train.seed={','.join(map(str, seeds))}"]
  os.makedirs(os.path.dirname(os.path.abspath(workdir)), exist_ok=True)
  with runs.output_to(workdir + ".log"):
    main(argv)
  results = []
  for seed in seeds:
    point = os.path.join(workdir, f"seed={seed}")
    results.append({**runs.measure(run_lib.Run.build_with_data(run_lib.saved_config(point)), point, float("nan")),
                    "seed": seed})
  return results, argv


def config_flags(argv: list[str]) -> list[str]:
  """The run-config flags among an experiment's command line (--config, --gin_file, --config.KEY=VALUE, ...)."""
  return [a for a in argv if a.startswith(BASE_FLAGS)]


def _launch(args, base: list[str], points) -> None:
  for name, settings in points:
    print(f"# {name}")
    code = launch.main([*shlex.split(args.launch), f"--workdir={os.path.join(args.workdir, name)}", *base,
                        *(f"--config.{k}={v}" for k, v in settings.items()), *(["--run"] if args.run else [])])
    if code:
      raise UserError(f"launching point {name} failed (above); the points before it are launched: fix the cause "
                      "and rerun this command")
  print(f"When the jobs are done: pretrain sweep --workdir={args.workdir} --report")


def _report(args, command: str, configs: dict | None = None, show: bool = True) -> None:
  from pretrain.experiments import sweep_report as report_lib  # pylint: disable=g-import-not-at-top  (not for --help)
  if configs is None:
    manifest = sweep_grid.read_manifest(args.workdir)
    configs = {name: _point_config(manifest["base"], settings)
               for name, settings in sweep_grid.point_names(manifest["grid"])}
  points = report_lib.collect(args.workdir, {name: cfg.train.steps for name, cfg in configs.items()})
  report_lib.report(args.workdir, points, args.metric, command, next(iter(configs.values())))
  if not show:
    return
  print(files.read_text(os.path.join(args.workdir, "sweep.md")))
  print(f"Wrote {', '.join(os.path.join(args.workdir, f) for f in ('sweep.md', 'sweep.csv', 'sweep.png'))}")


if __name__ == "__main__":
  main(sys.argv[1:])
