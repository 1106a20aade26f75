"""A sweep's report: each point's final metrics read from its workdir, and sweep.csv (a row per point),
sweep.md (a row per setting, the mean and 95% interval over the seed axes) and sweep.png (one metric against the
first swept setting that is not a seed), written in the sweep's directory (pretrain/experiments/sweep.py)."""

import csv
import io
import json
import math
import os
import re

from pretrain import objectives
from pretrain.downstream import stats
from pretrain.experiments import figures, runs
from pretrain.experiments.sweep_grid import is_seed, point_names, read_manifest
from pretrain.system import files
from pretrain.system.errors import UserError
from pretrain.train import checksums, metrics as metrics_lib


def final_record(workdir: str, steps: int) -> dict | None:
  """The metrics logged at the run's last step, with its final evaluation; None while the run is unfinished:
  finished means that its final checkpoint is committed and intact too (a process killed after logging its last
  evaluation, while that checkpoint was still being written, has not finished)."""
  # Its readable records: a damaged line does not stop the sweep (training the point moves such a file aside).
  records = [r for r in metrics_lib.read(workdir, strict=False) if r["step"] == steps] if files.isdir(workdir) else []
  merged = {k: v for r in records for k, v in r.items()}
  final = os.path.join(workdir, "checkpoints", str(steps))
  return merged if "eval/loss" in merged and files.isdir(final) and not checksums.problem(final) else None


def point_values(workdir: str, steps: int) -> dict[str, float]:
  """The numbers of a finished point: its final eval/ metrics, train/loss and, where measured, the probes'
  means over their seeds (probe/TASK) and those of the initial parameters (probe/TASK/init)."""
  record = final_record(workdir, steps) or {}
  values = {k: v for k, v in record.items()
            if isinstance(v, (int, float)) and (k.startswith("eval/") or k == "train/loss")}
  probe_dir = os.path.join(workdir, "eval")
  for name in sorted(os.path.basename(p) for p in files.glob(os.path.join(probe_dir, "probe-*.json"))):
    # probe-TASK-stepN.json: the whole measure (one of part of it, probe-TASK-limitL-stepN.json, is not the point's).
    if re.fullmatch(rf"probe-[a-z_]+-step{steps}\.json", name):
      rows = probe_rows(os.path.join(probe_dir, name)) or {}
      for row, measures in rows.items():
        for measure, seeds in measures.items():
          values[f"probe/{measure}" + ("/init" if row == "random init" else "")] = sum(seeds) / len(seeds)
  return values


def probe_rows(path: str) -> dict | None:
  """{row: {measure: each seed's value}} of a probe's results file (pretrain probe), None where it is missing or
  damaged (the point counts as not probed: the sweep probes it again)."""
  try:
    rows = json.loads(files.read_text(path))["rows"]
    if all(isinstance(v, (int, float)) for measures in rows.values() for seeds in measures.values() for v in seeds):
      return rows
  except (*files.errors(), ValueError, TypeError, KeyError, AttributeError):  # Cut short, edited, a directory.
    pass
  return None


def collect(sweep_dir: str, steps: dict[str, int]) -> list[dict]:
  """Each point: {'name', 'settings': {key: value}, 'values': {metric: number}} ({} while unfinished).
  `steps`: each point's train.steps, by name."""
  return [{"name": name, "settings": settings, "values": point_values(os.path.join(sweep_dir, name), steps[name])}
          for name, settings in point_names(read_manifest(sweep_dir)["grid"])]


def probe_file(workdir: str, task: str, steps: int) -> str:
  return os.path.join(workdir, "eval", f"probe-{task}-step{steps}.json")


def probed(workdir: str, task: str, steps: int) -> bool:
  return probe_rows(probe_file(workdir, task, steps)) is not None


# Fields that change the examples of a run's own objective (data.objective on data.source: its eval/loss,
# eval/accuracy, ...), besides the objectives' own settings (data.mlm_rate, ...). A schedule's other members do not.
TASK_FIELDS = ("data.objective", "data.mixture", "data.task", "data.task_module")
# Fields that change the validation text itself: every eval/ metric (data.train_files where the validation split is
# held out of it).
TEXT_FIELDS = ("data.source", "data.validation_files", "data.tfds_name", "data.tfds_data_dir",
               "data.validation_split")


def incomparable(metric: str, swept: list[str], cfg=None) -> str:
  """Why `metric` does not compare across the settings of the `swept` fields ('' where it does): a run's own
  metrics measure its objective's examples, which the objective and its settings change (those of the objectives
  `cfg` may name), and an eval task's (eval/SOURCE_OBJECTIVE/...) those of its objective's settings; eval/ metrics
  measure the validation text, which the data source changes; figures per token count tokens, which the tokenizer
  changes (bits per byte do not)."""
  specs = objectives.known(cfg)
  own = re.fullmatch(r"(eval|train)/[^/]+", metric)
  task = re.fullmatch(r"eval/([^/]+)/[^/]+", metric)
  read = {key for spec in specs if task and task.group(1).endswith(f"_{spec.name}") for key in spec.settings}
  settings = objectives.settings(specs)
  text_fields = (*TEXT_FIELDS, *(("data.train_files",) if cfg is None or not cfg.data.validation_files else ()))
  why = [*(f"{k} changes the objective's examples" for k in swept
           if (own and (k in TASK_FIELDS or k in settings)) or k in read),
         *(f"{k} changes the validation text" for k in swept if metric.startswith("eval/") and k in text_fields),
         *(f"{k} changes what a token is" for k in swept if metric.startswith(("eval/", "train/"))
           and k.startswith("tokenizer.") and not metric.endswith("bits_per_byte"))]
  return "; ".join(why)


def report(sweep_dir: str, points: list[dict], metric: str, command: str, cfg=None) -> list[str]:
  """Writes sweep.csv, sweep.md and sweep.png in `sweep_dir`; returns sweep.md's blocks after its title and
  command (pretrain.experiments.runs.markdown). While points are unfinished (a sweep writes its report after each
  point) sweep.md says so first and the plot in its title. `cfg`: a point's config (the objectives it may name)."""
  grid = read_manifest(sweep_dir)["grid"]
  finished = [p for p in points if p["values"]]
  if not finished:
    raise UserError(f"no point of the sweep in {sweep_dir} has finished; run the sweep first")
  measured = list(dict.fromkeys(k for p in finished for k in p["values"]))
  if metric not in measured:
    raise UserError(f"--metric={metric} was not logged by the sweep's runs; choose one of {', '.join(measured)}")
  table = io.StringIO(newline="")
  writer = csv.writer(table)
  writer.writerow(["point", *grid, *measured])
  for p in points:
    writer.writerow([p["name"], *p["settings"].values(), *(p["values"].get(m, "") for m in measured)])
  files.write_atomically(os.path.join(sweep_dir, "sweep.csv"), table.getvalue().encode())
  swept = [k for k in grid if not is_seed(k)]
  seeds = [k for k in grid if is_seed(k)]
  groups = {}  # setting -> {its seeds' values: the run's values}
  for p in finished:
    groups.setdefault(tuple(p["settings"][k] for k in swept), {})[tuple(p["settings"][k] for k in seeds)] = \
        p["values"]
  columns = [m for m in measured if m.count("/") == 1 or m.startswith("probe/") or m == metric]
  initial = {m: f"{m}/init" for m in columns if m.startswith("probe/") and f"{m}/init" in measured}
  header = [*(k.rsplit(".", 1)[-1] for k in swept), "runs", *columns, *(f"{m} - init (paired)" for m in initial)]
  rows = []
  for setting, runs_ in groups.items():
    values = list(runs_.values())
    cells = [stats.text([v[m] for v in values if m in v]) if any(m in v for v in values) else "" for m in columns]
    cells += [stats.paired([v[m] for v in values if m in v and i in v], [v[i] for v in values if m in v and i in v])
              .text() for m, i in initial.items()]
    rows.append([*setting, str(len(values)), *cells])
  table = "\n".join("| " + " | ".join(row) + " |" for row in [header, ["---"] * len(header), *rows])
  label = lambda s: ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in zip(swept, s)) or "base"
  by_setting = {label(s): {seed: v[metric] for seed, v in runs_.items() if metric in v} for s, runs_ in groups.items()}
  higher_better = metric.endswith(("accuracy", "probe")) or metric.startswith("probe/")
  replicated = max(len(r) for r in groups.values()) > 1
  unlike = incomparable(metric, swept, cfg)
  if unlike:
    alike = [m for m in measured if m != metric and not m.endswith("/init") and not incomparable(m, swept, cfg)]
    verdict = (f"{metric} is not compared: {unlike}, so its settings measure different things. Compare them on a "
               "measure alike for all: " + (f"--report --metric={alike[0]}" + "".join(f" or {m}" for m in alike[1:4])
                                            if alike else "rerun with --probe (probe/...) or, for decoder-only runs, "
                                            "--config.data.eval_objectives=\"('clm',)\" (eval/TASK/...)") + ".")
  elif replicated:
    apart = stats.apart(by_setting, higher_better, pair=True)
    verdict = (f"{metric}, {stats.VERDICT[0].lower()}{stats.VERDICT[1:]} "
               + ("; ".join(apart) if apart else "none (every difference is within the runs' spread)") + ".")
  else:
    verdict = (f"{metric}: one run per setting, so no interval and no difference that can be called real; "
               "repeat each setting over seeds (--grid.train.seed=0,1,2) to compare them.")
  if metric in initial:
    against = stats.against_initial({label(s): [v[metric] for v in r.values() if initial[metric] in v]
                                     for s, r in groups.items()},
                                    {label(s): [v[initial[metric]] for v in r.values() if initial[metric] in v]
                                     for s, r in groups.items()})
    better = [name for name, (d, is_real) in against.items() if is_real and (d.mean > 0) == higher_better]
    worse = [name for name, (d, is_real) in against.items() if is_real and (d.mean > 0) != higher_better]
    verdict += (f" Against their own initial parameters (paired, Holm): better {', '.join(better) or 'none'}; "
                f"worse {', '.join(worse) or 'none'}.")
  unfinished = [p["name"] for p in points if not p["values"]]
  partial = f"partial: {len(finished)} of {len(points)} points finished" if unfinished else ""
  over_runs = (f"the final metrics of a setting's runs (the unit: one run per value of {' and '.join(seeds)}), the "
               "mean +- the 95% interval (Student's t) over the runs" if replicated else
               "the final metrics of a setting's one run (no interval: one run per setting)")
  blocks = [
      *([f"{partial.capitalize()}; this report is rewritten as each point finishes."] if partial else []),
      f"Each row: {over_runs}. eval/ metrics are those of training's last evaluation "
      "(train.eval_batches batches of the validation split); probe/ ones are each run's mean over the probe's own "
      "seeds, /init the same model at its initial parameters (the baseline pre-training must beat), and "
      "'- init (paired)' each run minus its own initial parameters, the interval over those differences.",
      table,
      f"![{metric}](sweep.png)",
      verdict,
  ]
  if unfinished:
    blocks.append(f"Not finished yet ({len(unfinished)}): {', '.join(unfinished)} (a running sweep trains them in "
                  "turn; rerun a stopped sweep's command to continue it).")
  text = runs.markdown([f"# Sweep: {', '.join(k for k in grid)}", "Command:", "    " + command, *blocks])
  files.write_atomically(os.path.join(sweep_dir, "sweep.md"), text.encode())
  _plot(os.path.join(sweep_dir, "sweep.png"), grid, swept, groups, metric, partial)
  return blocks


def _plot(path: str, grid: dict, swept: list[str], groups: dict, metric: str, partial: str) -> None:
  """`metric` against the first swept setting (numeric where its values are), a line per setting of the others,
  with the 95% intervals as error bars; `partial`: the title says how many points are in."""
  with figures.drawn(path, size=(6, 4)) as ax:
    x_key = swept[0] if swept else None
    x_values = grid[x_key] if x_key else ["base"]
    numeric = all(_number(v) is not None for v in x_values)
    lines = {}
    for setting, runs_ in groups.items():
      lines.setdefault(setting[1:], []).append((setting[0] if setting else "base",
                                                stats.interval([v[metric] for v in runs_.values() if metric in v])))
    for others, line in lines.items():
      line.sort(key=lambda item: x_values.index(item[0]))
      xs = [_number(x) if numeric else x_values.index(x) for x, _ in line]
      means = [m for _, (m, _) in line]
      halves = [0.0 if math.isnan(h) else h for _, (_, h) in line]
      label = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in zip(swept[1:], others)) or None
      ax.errorbar(xs, means, yerr=halves, marker="o", capsize=3, label=label)
    if not numeric:
      ax.set_xticks(range(len(x_values)), x_values)
    elif all(_number(v) > 0 for v in x_values) and max(map(_number, x_values)) >= 10 * min(map(_number, x_values)):
      ax.set_xscale("log")  # A learning rate's or a size's grid: its points evenly apart, their labels apart.
      ax.set_xticks([_number(v) for v in x_values], x_values)
      ax.minorticks_off()
    ax.set_xlabel(x_key.rsplit(".", 1)[-1] if x_key else "")
    ax.set_ylabel(metric)
    replicated = max(len(r) for r in groups.values()) > 1
    ax.set_title(f"{metric} " + ("(mean and 95% interval over seeds)" if replicated else "(one run per setting)")
                 + (f"\n{partial}" if partial else ""), fontsize=10)
    if any(others for others in lines):
      ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


def _number(text: str) -> float | None:
  try:
    return float(text)
  except ValueError:
    return None
