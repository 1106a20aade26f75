"""Benchmarks resuming: the time from start to the first training batch at positions deep into the stream.

  python tools/bench_resume.py [--config=quickstart] [--positions=0,1e4,1e5,1e6,1e7] \
      [--replay_up_to=1e5] [--config.KEY=VALUE ...]

For each position (rows of the training stream already read): the indexed
pipeline (data.pipeline=indexed) started from a checkpoint's position there,
and the replay pipeline (data.pipeline=replay) that passes over the rows
before it. Replay is run up to --replay_up_to rows; beyond, its time is the
measured rate extrapolated (marked ~). The indexed position at P rows is the
window holding about the P-th row (windows hold a measured average of rows);
its cost does not depend on the exact row. Also prints the token store's
build time and size. Figures are recorded in tools/bench_resume.md.
"""

import os
import shutil
import time

from pretrain import cli
from pretrain.config import POSITIVE
from pretrain.system import data_cache
from pretrain.system.errors import exit_on_user_error


def _first_batch_seconds(make) -> float:
  start = time.perf_counter()
  next(make())
  return time.perf_counter() - start


@exit_on_user_error
def main(argv: list[str], prog: str = "tools/bench_resume.py") -> None:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--positions", default="0,1e4,1e5,1e6,1e7", help="rows already read, comma-separated")
  parser.add_argument("--replay_up_to", type=cli.number(POSITIVE), default=1e5, help="longest replay actually run (rows)")
  args, cfg = cli.parse_command_line(parser, argv)
  from pretrain import run as run_lib  # pylint: disable=g-import-not-at-top  (bench runs without TF)
  from pretrain.data import sources, token_store  # pylint: disable=g-import-not-at-top  (bench runs without TF)

  run = run_lib.Run.build_with_data(cfg)
  task, source, _ = run.member_tasks()[0]
  store_dir = token_store.directory(data_cache.cache_dir(cfg.data), source, "train", run.vocabulary)
  shutil.rmtree(store_dir, ignore_errors=True)
  start = time.perf_counter()
  store = token_store.open_or_build(task, source, "train", run.vocabulary, data_cache.cache_dir(cfg.data))
  build = time.perf_counter() - start
  size = sum(e.stat().st_size for e in os.scandir(store_dir) if e.name.endswith(".array_record"))
  batch = cfg.train.batch_size
  first, read = run.train_batches(), 0
  while first.position()["streams"][0]["members"][0][0] < 2:  # Rows per window, averaged over the first ones.
    next(first)
    read += batch
  window, row = first.position()["streams"][0]["members"][0]
  rows_per_window = (read - row) / window
  print(f"{os.cpu_count()} CPU cores; {cfg.data.source} train split: {len(store):,} documents, "
        f"{store.meta['tokens']:,} tokens; store built in {build:.1f} s, {size / 2**20:.1f} MiB; "
        f"{cfg.data.objective}, batch {batch}; about {rows_per_window:.0f} rows per window")
  print(f"{'position (rows)':>16}{'indexed s':>11}{'replay s':>11}")
  replay_rate = None
  for text in args.positions.split(","):
    rows = int(float(text))
    position = first.position()  # Of this stream: its task, seed, store and windows.
    position["streams"][0].update(rows=rows, members=[[int(rows // rows_per_window), 0]])
    fast = _first_batch_seconds(lambda: run.train_batches(position))
    if rows <= args.replay_up_to:
      slow = _first_batch_seconds(lambda: _replay(run, rows))
      replay_rate = rows / slow if rows else replay_rate
      shown = f"{slow:>11.1f}"
    else:
      shown = f"{'~' + format(rows / replay_rate, ',.0f'):>11}" if replay_rate else f"{'-':>11}"
    print(f"{rows:>16,}{fast:>11.2f}{shown}")


def _replay(run, rows: int):
  from pretrain.data.replay import ReplayBatches  # pylint: disable=g-import-not-at-top  (bench runs without TF)
  c = run.cfg
  return ReplayBatches(run.task, run.task_lengths, run.family, batch_size=c.train.batch_size, seed=c.train.seed,
                       host_sharding=c.data.host_sharding, share=run.data_share,
                       position={"task": run.task, "examples": rows, "batch_size": c.train.batch_size, "processes": 1})
