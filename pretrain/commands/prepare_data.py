"""Tokenizes a config's training data once into token stores, before training (data.pipeline=indexed).

  pretrain prepare-data [--config=quickstart] [--config.KEY=VALUE ...] [--shard=I --num_shards=N]
  pretrain prepare-data --num_shards=N --beam="--runner=DataflowRunner --project=... ..."

Training builds a missing store itself, in one shard; run this first for a
large source, or on N hosts at once (--shard=0 .. N-1, a shared cache
directory: data.cache_dir or $PRETRAIN_CACHE), each tokenizing every N-th
document, or as an Apache Beam pipeline whose workers build the N shards
(--beam=PIPELINE_OPTIONS; pip install -e '.[beam]'; the workers need the
project installed and the shared cache directory). The store is usable once
every shard is written. Prints each store's directory, documents, tokens and size.
"""

import json
import os
import sys

import ml_collections

from pretrain import cli
from pretrain.system import data_cache
from pretrain.system.errors import UserError, exit_on_user_error


def _check_preparable(cfg) -> None:
  if cfg.data.pipeline == "replay":
    raise UserError("data.pipeline=replay reads its examples through seqio as it trains, not from a token store: "
                    "there is none to prepare; prepare for the indexed pipeline (the default) or leave prepare-data "
                    "out")
  if cfg.data.task:
    raise UserError(f"data.task={cfg.data.task!r} is read with data.pipeline=replay (its preprocessors are its own): "
                    "it has no token store to prepare")


def prepare(cfg, shard: int = 0, num_shards: int = 1) -> list[dict]:
  """Builds shard `shard` of `num_shards` of the training store of every source of `cfg`; returns what each
  store holds (empty counts for a store that waits for other shards)."""
  from pretrain import run as run_lib  # pylint: disable=g-import-not-at-top  (not for --help)
  from pretrain.data import token_store  # pylint: disable=g-import-not-at-top  (not for --help)
  _check_preparable(cfg)
  run = run_lib.Run.build_with_data(cfg)
  summaries = []
  for task, source, _ in run.member_tasks():
    store_dir = token_store.directory(data_cache.cache_dir(cfg.data), source, "train", run.vocabulary)
    token_store.build_shard(task, source, "train", run.vocabulary, store_dir, shard, num_shards)
    summary = {"source": source.name, "directory": store_dir, "documents": 0, "tokens": 0,
               "bytes": sum(e.stat().st_size for e in os.scandir(store_dir) if e.name.endswith(".array_record"))}
    if os.path.exists(os.path.join(store_dir, token_store.META)):
      store = token_store.TokenStore(store_dir, run.vocabulary)
      summary.update(documents=len(store), tokens=store.meta["tokens"])
    summaries.append(summary)
  return summaries


def _prepare_shard(config_json: str, shard: int, num_shards: int) -> list[dict]:
  """prepare() on a Beam worker: the config travels as JSON."""
  return prepare(ml_collections.ConfigDict(json.loads(config_json)), shard, num_shards)


def prepare_with_beam(cfg, num_shards: int, options: str) -> list[dict]:
  """The num_shards shards of every store built by an Apache Beam pipeline (runner and its settings: `options`,
  Beam's command-line flags), one shard per work item; returns the stores' summaries."""
  try:
    import apache_beam as beam  # pylint: disable=g-import-not-at-top  (Apache Beam, the beam extra)
  except ImportError:
    raise UserError("--beam needs Apache Beam: pip install -e '.[beam]'") from None
  from pretrain import config as config_lib, run as run_lib  # pylint: disable=g-import-not-at-top  (not for --help)
  _check_preparable(cfg)  # Here, not in a worker.
  run_lib.Run.build_with_data(cfg)  # The vocabulary, trained here once if missing, for every worker to find.
  config_json = config_lib.to_json(cfg)
  pipeline_options = beam.options.pipeline_options.PipelineOptions(options.split())
  with beam.Pipeline(options=pipeline_options) as pipeline:
    _ = (pipeline | beam.Create(range(num_shards)) | beam.Reshuffle()
         | beam.Map(lambda shard: _prepare_shard(config_json, shard, num_shards)))
  return prepare(cfg, 0, num_shards)  # Every shard is written now: only the summaries remain.


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain prepare-data") -> None:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--shard", type=cli.at_least(0), default=0, help="which shard this process writes (0-based)")
  parser.add_argument("--num_shards", type=cli.at_least(1), default=1, help="how many shards the store has")
  parser.add_argument("--beam", metavar="PIPELINE_OPTIONS", default=None,
                      help="build all the shards with Apache Beam, e.g. '--runner=DirectRunner'")
  args, cfg = cli.parse_command_line(parser, argv)
  if args.shard >= args.num_shards:
    raise UserError(f"--shard={args.shard} --num_shards={args.num_shards}: give 0 <= shard < num_shards")
  if args.beam is not None and args.shard:
    raise UserError("--beam builds every shard; leave out --shard")
  summaries = (prepare_with_beam(cfg, args.num_shards, args.beam) if args.beam is not None
               else prepare(cfg, args.shard, args.num_shards))
  for s in summaries:
    state = (f"{s['documents']:,} documents, {s['tokens']:,} tokens" if s["documents"]
             else "waiting for the other shards")
    print(f"{s['source']}: {s['directory']} ({state}, {s['bytes'] / 2**20:.1f} MiB)")


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
