"""`pretrain experiment data_quality`: the web defects it puts in, and a tiny run of its page."""

import collections
import itertools
import json
import os
import re

import numpy as np
import pytest

from pretrain.data import dedup
from pretrain.experiments import data_quality
from pretrain.experiments import web_defects
from tests.experiments import pages


@pytest.mark.slow
def test_web_defects_are_put_in_at_their_rates_with_labels(corpus_source):
  documents = list(itertools.islice(corpus_source.texts("train"), 400))
  mix = web_defects.inject(documents, seed=3)
  assert mix == web_defects.inject(documents, seed=3)  # Deterministic.
  labels = collections.Counter(label for _, label in mix)
  for defect, share in {**web_defects.IN_PLACE, **web_defects.ADDED}.items():
    assert labels[defect] == round(share * 400), defect
  texts = [text for text, _ in mix]
  by_label = collections.defaultdict(list)
  for text, label in mix:
    by_label[label].append(text)
  assert all(t in documents for t in by_label["clean"])
  assert all(t not in documents for label in web_defects.IN_PLACE for t in by_label[label])
  assert all("\u00e2\u20ac" in t or "\u00c3" in t for t in by_label["mojibake"])  # UTF-8 read as cp1252.
  assert all(any(line in web_defects.NAVIGATION for line in t.splitlines()) for t in by_label["boilerplate"])
  for label in ("duplicate", "near_duplicate"):  # Each copy comes after its source, where the source is unchanged.
    for text in by_label[label]:
      source = max(documents, key=lambda d: dedup.jaccard(text, d))
      assert dedup.jaccard(text, source) > 0.5, label
      position = len(texts) - 1 - texts[::-1].index(text)
      if source in by_label["clean"]:
        assert texts.index(source) < position, label
  assert all(set(t.replace(",", "").split()) <= set(web_defects.SPAM_WORDS) for t in by_label["spam"])


@pytest.mark.slow
@pytest.mark.extended  # The whole page: see tests/conftest.py.
def test_data_quality_writes_tables_and_plot(tmp_path, cache_dir, vocabulary, monkeypatch, capsys):
  del vocabulary
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  out = str(tmp_path / "docs" / "data_quality")
  data_quality.main(["--d_model=32", "--num_layers=1", "--head_dim=16", f"--out={out}",
                     f"--out_dir={tmp_path / 'runs'}", "--documents=300", "--steps=10", "--evals=2", "--seeds=0,1",
                     *pages.TINY])
  assert os.path.getsize(out + ".png") > 0
  text = open(out + ".md").read()
  rows = pages.tables(out + ".md")[0]
  assert [row.split("|")[1].strip() for row in rows[:4]] == ["clean", "defective", "curated",
                                                            "unigram (counts, add-one) of the clean documents"]
  assert all(re.search(r"\| 2 \| \d\.\d{3} \+- \d\.\d{3} \(\d\.\d\d\)", row) for row in rows[:3])
  assert re.search(r"curation takes back -?\d+\.\d\d( \+- \d+\.\d\d)? \(the share per seed", " ".join(text.split()))
  # Every rung's final parameters on the clean validation rows: for the clean rung, its own last evaluation's.
  own = [[json.loads(line) for line in open(tmp_path / "runs" / rung / f"seed={seed}" / "metrics.jsonl")
          if "eval/loss" in line][-1]["eval/loss"] for rung in ("clean", "curated") for seed in (0, 1)]
  table = [float(re.search(r"\| 2 \| (\d\.\d{3}) \+-", row).group(1)) for row in rows[:3]]
  assert table[0] == pytest.approx(np.mean(own[:2]), abs=6e-4)
  assert "every rung's final parameters on the same uncurated rows" in " ".join(text.split())
  spam = round(web_defects.ADDED["spam"] * 300)
  assert f"| spam | {spam} | {spam} | 100.0% |" in text  # Keyword spam has no stop words.
  assert "| encoding_errors | " in text and "| near_duplicate | " in text
  printed = capsys.readouterr().out
  assert re.search(r"\[3/3\] curated .* val loss \d", printed)
  # The curated rung's files, read by the run through the stage, and its record in the workdir.
  report = json.loads(open(tmp_path / "runs" / "curated" / "seed=1" / "data_curation.json").read())
  mix = round(300 * (1 + sum(web_defects.ADDED.values())))
  assert report["files"]["train"]["documents"] == mix and report["files"]["train"]["kept"] <= mix / 2
  assert report["files"]["train"]["removed"]["stop_words"]["tokens"] > 0
