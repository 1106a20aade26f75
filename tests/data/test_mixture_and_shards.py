"""Mixtures of sources at rates, and host shards of a split."""

import itertools

import numpy as np
import seqio

from pretrain import configs, objectives
from pretrain.data import sources, tasks


def test_mixture_follows_the_rates(tmp_path, cache_dir, vocabulary):
  (tmp_path / "zebra.txt").write_text("\n".join(f"zebra {i} " * 40 for i in range(2000)))
  data_cfg = configs.load("quickstart").data
  data_cfg.cache_dir = cache_dir
  data_cfg.mixture = (("corpus", "", 1.0), ("files", f"{tmp_path}/*.txt", 3.0))
  members = sources.mixture_sources(data_cfg)
  assert [(s.name, rate) for s, rate in members] == [("mix0_corpus", 1.0), ("mix1_files", 3.0)]
  name = tasks.register_mixture(members, vocabulary, objectives.make("clm", data_cfg, seed=0))
  zebra = vocabulary.encode(" zebra")[-1]
  dataset = seqio.get_mixture_or_task(name).get_dataset({"targets": 64}, split="train", shuffle=True, seed=1)
  examples = list(itertools.islice(dataset.as_numpy_iterator(), 800))
  share = np.mean([zebra in ex["targets"] for ex in examples])
  assert abs(share - 0.75) < 4 * np.sqrt(0.75 * 0.25 / 800)


def test_host_shards_are_disjoint_and_cover_the_split(corpus_source, vocabulary):
  name = tasks.register(corpus_source, vocabulary, objectives.make("clm", None, seed=0))
  task = seqio.get_mixture_or_task(name)

  def pieces(shard_info=None):
    dataset = task.get_dataset({"targets": 128}, split="validation", shuffle=False, seed=0, shard_info=shard_info)
    return [tuple(ex["targets"].tolist()) for ex in dataset.as_numpy_iterator()]

  whole = pieces()
  shards = [pieces(seqio.ShardInfo(i, 2)) for i in range(2)]
  assert shards[0] and shards[1]
  # Documents' lone final EOS rows repeat across shards; every longer row belongs to one document, so one shard.
  assert not {row for row in shards[0] if len(row) > 1} & set(shards[1])
  assert sorted(shards[0] + shards[1]) == sorted(whole)
