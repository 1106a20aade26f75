"""The Penn Treebank as a source (pretrain/data/ptb.py), the words vocabulary kind and per-word perplexity: the
published counts and the Kneser-Ney 5-gram's published test perplexity, reproduced."""

import json
import math
import os
import re
import subprocess

import numpy as np
import pytest

from pretrain import objectives, vocab
from pretrain.data import ptb, sources
from pretrain.downstream import ngram
from tests.conftest import REPO, tiny_config


@pytest.fixture(scope="module")
def lines():
  return {split: ptb.lines(split) for split in ptb.SPLITS}


@pytest.fixture(scope="module")
def words_vocabulary(lines):
  return vocab.from_bytes("ptb.json", vocab.train(iter(lines["train"]), "words", 10_240, "unigram", 0,
                                                  objectives.pieces()), 0)


def test_the_splits_hold_the_published_lines_and_words(lines):
  """Mikolov's counts: lines, and words with one end of sentence per line (the denominator of perplexity)."""
  assert {s: len(l) for s, l in lines.items()} == {"train": 42_068, "validation": 3_370, "test": 3_761}
  assert {s: sum(len(line.split()) + 1 for line in l) for s, l in lines.items()} == {
      "train": 929_589, "validation": 73_760, "test": 82_430}


def test_the_words_kind_holds_every_training_word_and_reads_lines_as_sentences(lines, words_vocabulary):
  regular = vocab.first_regular_id(words_vocabulary)
  assert words_vocabulary.vocab_size - regular == 9_998  # 10,000 types, less <unk> and the end of sentence.
  assert words_vocabulary.tokenizer.id_to_token(regular) == "the"  # The most frequent word first.
  assert words_vocabulary.encode("the <unk> zyzzyva\nthe") == [regular, 2, 2, 1, regular]
  test = sum((words_vocabulary.encode(line) + [1] for line in lines["test"]), [])
  assert len(test) == 82_430 and test.count(2) == sum(line.split().count("<unk>") for line in lines["test"])


def test_kneser_ney_5_gram_reproduces_the_published_test_perplexity(lines, words_vocabulary):
  """Mikolov et al. 2011: a Kneser-Ney 5-gram, 141.2 on the test split (the trigram about 148)."""
  def segments(split):
    return [np.array(words_vocabulary.encode(line) + [1]) for line in lines[split]]
  train, test = segments("train"), segments("test")
  perplexity = {order: math.exp(-ngram.fit(train, order, words_vocabulary.vocab_size).logprobs(test).sum() / 82_430)
                for order in (3, 5)}
  assert perplexity[5] == pytest.approx(141.2, rel=0.01) and perplexity[3] == pytest.approx(148, rel=0.01)


@pytest.mark.slow
def test_eval_counts_every_word_of_a_split_once(run_train, run_pretrain, cache_dir, tmp_path, lines):
  """A words run over a few hundred Penn Treebank lines (as text files, the first 150 test lines its validation
  split): `pretrain eval` over the whole split scores as many tokens as the split has words and ends of sentence,
  so its per-word perplexity is its perplexity; the count rows' word perplexities come from the same tokens; and
  lm-eval's pretrain_ptb task on those 150 lines gives the same per-word perplexity."""
  (tmp_path / "train.txt").write_text("\n".join(lines["train"][:400]) + "\n")
  (tmp_path / "validation.txt").write_text("\n".join(lines["test"][:150]) + "\n")
  workdir = tmp_path / "run"
  data = [f"--config.data.train_files={tmp_path / 'train.txt'}",
          f"--config.data.validation_files={tmp_path / 'validation.txt'}"]
  result = run_train(workdir, "--config.data.source=files", *data, "--config.tokenizer.kind=words",
                     "--config.tokenizer.vocab_size=2048", "--config.tokenizer.extra_ids=0", "--config.train.steps=2")
  assert result.returncode == 0, result.stderr
  result = run_pretrain("eval", f"--workdir={workdir}", "--task=files_clm", "--ngram=2")
  assert result.returncode == 0, result.stderr
  summary = json.loads(next((workdir / "eval").glob("files_clm-validation-step2.json")).read_text())
  words = sum(len(line.split()) + 1 for line in lines["test"][:150])
  assert summary["words"] == words and summary["word_perplexity"] == pytest.approx(summary["perplexity"])
  bigram = summary["ngram"]["bigram (counts, interpolated Kneser-Ney)"]
  assert bigram["tokens"] == words and bigram["word_perplexity"] == pytest.approx(math.exp(bigram["loss"]))
  assert f"word_perplexity {summary['word_perplexity']:.2f}" in result.stdout
  from pretrain.downstream import harness  # pylint: disable=g-import-not-at-top  (lm-eval: the eval extra)
  results = harness.evaluate(str(workdir), [harness.PTB_TASK], limit=150, cache=cache_dir)
  assert results["results"][harness.PTB_TASK]["word_perplexity,none"] == pytest.approx(summary["word_perplexity"],
                                                                                       rel=1e-4)


@pytest.mark.slow
@pytest.mark.extended  # The whole page: see tests/conftest.py.
def test_the_tool_writes_published_and_our_rows(tmp_path, cache_dir, monkeypatch, capsys):
  """`pretrain experiment ptb` at a tiny size: the count rows (the 5-gram at its published figure), our config's
  two runs in each context with their interval, the published rows and a verdict per comparison; the stream arm's figures are
  its sliding windows'."""
  from pretrain.experiments import ptb as ptb_experiment  # pylint: disable=g-import-not-at-top
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  out = str(tmp_path / "docs" / "ptb")
  argv = ["--seeds=0,1", "--medium_seeds=", "--stream_seeds=0,1", "--stream_medium_seeds=", "--window=32",
          "--stride=16", f"--out={out}", f"--out_dir={tmp_path / 'runs'}",
          "--config.model.d_model=32", "--config.model.num_layers=1", "--config.model.num_heads=2",
          "--config.model.num_kv_heads=2", "--config.model.head_dim=16", "--config.model.mlp_dim=64",
          "--config.train.steps=2", "--config.train.eval_every=2", "--config.train.checkpoint_every=2",
          # Rows of 64: the runs evaluate whole splits, whose batches (not the 2 steps) take the time.
          "--config.train.batch_size=64", "--config.train.eval_batches=2", "--config.optimizer.warmup_steps=1"]
  assert ptb_experiment.main(argv) == 0
  text = open(out + ".md").read()
  rows = {row.split("|")[1].strip(): row for row in text.splitlines() if row.startswith("| ") and "---" not in row}
  assert re.search(r"\| 141\.\d \| 141\.2 \|$", rows["Kneser-Ney 5-gram (counts, ours)"])
  assert re.search(r"\| 2 \| [\d,]+ \| sentence \| [\d.]+ \+- [\d.]+ \| [\d.]+ \+- [\d.]+ \| \|$",
                   rows["ptb_small (ours)"])
  assert re.search(r"\| 2 \| [\d,]+ \| stream \| [\d.]+ \+- [\d.]+ \| [\d.]+ \+- [\d.]+ \| \|$",
                   rows["ptb_small stream (ours)"])
  stream = json.load(open(tmp_path / "runs" / "ptb_small_stream" / "seed0" / "result.json"))["result"]
  # What `pretrain eval --window=32 --stride=16` wrote for that run's test split (its file names the windows).
  windowed = json.load(open(tmp_path / "runs" / "ptb_small_stream" / "seed0" / "eval" /
                            "ptb_clm-test-window32-stride16-step2.json"))
  assert stream["test"] == windowed["word_perplexity"] and windowed["window"] == 32 and windowed["stride"] == 16
  assert "sliding windows of 32 words moving by 16" in " ".join(text.split())
  assert "| LSTM medium, dropout 0.5: 2 x 650, 39 epochs (Zaremba et al. 2014) | | | stream | | | 82.7 |" in text
  flat = " ".join(text.split())
  assert len(re.findall(r"- ptb_small: \+[\d.]+ \+- [\d.]+ against .*? \([\d.]+\): (above it|not shown to differ "
                        r"from it \(at this spread .*?\)|apart by its own interval, not after Holm's correction: "
                        r"not shown to differ) \(p = ", flat)) == len(ptb_experiment.PUBLISHED)
  assert len(re.findall(r"- ptb_small stream: [+-][\d.]+ \+- [\d.]+ against ", flat)) == len(ptb_experiment.PUBLISHED)
  assert "a one-sample two" in flat and "against the published figure, taken as a fixed value" in flat
  # Each arm described by its own config (the stream arm's 2400 steps lost to the command line's 2).
  assert "ptb_small: 32 wide, 1 layers, dropout 0.3, 2 steps" in flat and "ptb_small stream: 32 wide" in flat
  assert "ptb_small stream's steps were chosen on the validation split" in flat
  assert "ptb_medium stream's steps" not in flat  # Said only of an arm that ran.
  assert os.path.getsize(out + ".png") > 0
  assert re.findall(r"(ptb_small(?: stream)?) seed (\d): validation \d", capsys.readouterr().out) == [
      ("ptb_small", "0"), ("ptb_small stream", "0"), ("ptb_small", "1"), ("ptb_small stream", "1")]  # Seed by seed.
  # The stream arm alone, read back: the count rows are still fitted on sentences, not on the stream's rows.
  assert ptb_experiment.main([a for a in argv if not a.startswith("--seeds=")] + ["--seeds="]) == 0
  assert rows["Kneser-Ney 5-gram (counts, ours)"] in open(out + ".md").read()


def test_an_arm_s_settings_come_before_the_command_line():
  from pretrain.experiments import ptb as ptb_experiment  # pylint: disable=g-import-not-at-top
  cfgs = ptb_experiment.arm_configs([])
  assert cfgs["ptb_small stream"].data.context == cfgs["ptb_medium stream"].data.context == "stream"
  assert cfgs["ptb_small"].data.context != "stream" and cfgs["ptb_medium"].data.context != "stream"
  assert cfgs["ptb_small stream"].train.steps == 2 * cfgs["ptb_small"].train.steps == 2400
  assert cfgs["ptb_medium stream"].train.steps == 4000 and cfgs["ptb_medium"].train.steps == 3000
  cfgs = ptb_experiment.arm_configs([("train.steps", "7")])
  assert {c.train.steps for c in cfgs.values()} == {7} and cfgs["ptb_small stream"].data.context == "stream"


def test_a_config_of_one_run_is_placed_among_the_published_rows_without_a_verdict():
  from pretrain.experiments import ptb as ptb_experiment  # pylint: disable=g-import-not-at-top
  lines = ptb_experiment.verdicts({"ptb_small": [], "ptb_medium": [{"test": 98.8}]})
  assert len(lines) == 1 and lines[0].startswith("- ptb_medium: one run, so no interval and no test; its 98.8 lies")
  assert "below Kneser-Ney 5-gram (Mikolov et al. 2011) (141.2), " in lines[0]
  assert lines[0].endswith("and above LSTM medium, dropout 0.5: 2 x 650, 39 epochs (Zaremba et al. 2014) (82.7), "
                           "LSTM large, dropout 0.65: 2 x 1500, 55 epochs (Zaremba et al. 2014) (78.4), AWD-LSTM "
                           "(Merity et al. 2018) (57.3), Transformer-XL (Dai et al. 2019) (54.5).")


def test_the_aim_says_the_distance_and_what_the_curve_gives():
  """Short of the medium LSTM's 82.7: the best stream arm's distance, its validation curve's last fall, and how
  many more intervals at that rate would close it; met, no more than that; no stream arm, nothing."""
  from pretrain.experiments import ptb as ptb_experiment  # pylint: disable=g-import-not-at-top
  curve = lambda *values: [(step * 4096, value) for step, value in zip((0, 2500, 3000), values)]
  short = {"ptb_small stream": [{"test": 118.0, "curve": curve(9000, 140.0, 130.0)}],
           "ptb_medium stream": [{"test": 98.0, "curve": curve(9000, 112.0, 110.0)},
                                 {"test": 100.0, "curve": curve(9000, 110.0, 108.0)}]}
  said = ptb_experiment.aim(short)
  # 1 - 109 / 111 = 1.8%; log(82.7 / 109) / log(109 / 111) = 15.2, so 16 more intervals of 500 x 4096 positions.
  assert said == ("The aim, below the medium LSTM's 82.7 on test: ptb_medium stream reaches 99.0 (2 run(s)), 16.3 "
                  "above it: not met. Its validation perplexity in training (its rows, no windows) fell 1.8% over "
                  "its last interval of 2,048,000 token positions, from 111.0 to 109.0, where the learning rate "
                  "schedule ends; at that rate 16 more such intervals would close it, and more if the falls keep "
                  "shrinking.")
  met = {"ptb_medium stream": [{"test": 80.0, "curve": curve(9000, 90.0, 85.0)}]}
  assert ptb_experiment.aim(met).endswith("reaches 80.0 (1 run(s)), below it (the verdicts above say whether "
                                          "beyond its seeds' spread).")
  assert ptb_experiment.aim({"ptb_small": [{"test": 110.0, "curve": curve(9000, 130.0, 120.0)}]}) == ""


def test_git_keeps_the_page_runs_figures_and_not_their_checkpoints():
  """The page's runs (ptb.py's --out_dir, docs/ptb_runs) keep result.json and goodput.json in git (.gitignore), so
  that its command reads them back on a fresh clone; their checkpoints and logs stay out."""
  run = "docs/ptb_runs/ptb_small_stream/seed1"
  # Files, not folders (a folder that exists is re-included, and its files are not): the same on any clone.
  paths = [f"{run}/{name}" for name in ("result.json", "goodput.json", "checkpoints/2400/_CHECKPOINT_METADATA",
                                        "train.log", "metrics.jsonl")]
  ignored = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=REPO, capture_output=True,
                           text=True).stdout.split()
  assert ignored == paths[2:]


def test_curation_leaves_the_test_split_whole(tmp_path):
  """data.filters and data.dedup decide the train and validation documents; the test split stays the published
  one (it was dropped: `pretrain eval --split=test` refused a curated run)."""
  cfg = tiny_config("--config.data.source=ptb", "--config.data.dedup=exact", f"--config.data.cache_dir={tmp_path}")
  source = sources.make_source(cfg.data)
  assert source.curation is not None and set(source.splits) == set(ptb.SPLITS)
  assert sources.words(source, "test") == 82_430
  assert sum(1 for _ in source.texts("train")) < 42_068  # Repeated sentences went.
