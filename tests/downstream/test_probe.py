"""The downstream evaluation (pretrain/downstream/, `pretrain probe`): the probe's pairs and classifiers, its
held-out documents, the labelled task's splits, fine-tuning, the intervals, and a model trained on the corpus
beating its initial parameters."""

import json
import re

import numpy as np
import pytest

from pretrain import run as run_lib
from pretrain.commands import probe as probe_command
from pretrain.data import corpus
from pretrain.downstream import finetune, probe, stats, topics, zero_shot
from tests.conftest import tiny_config, tiny_run

# Big enough to learn something in 300 steps, small enough to train in about 20 s.
SMALL = ["--config.model.d_model=128", "--config.model.num_layers=2", "--config.model.num_heads=8",
         "--config.model.num_kv_heads=8", "--config.model.head_dim=16", "--config.model.mlp_dim=256",
         "--config.data.seq_len=64", "--config.train.batch_size=16", "--config.train.steps=300",
         "--config.train.log_every=100", "--config.train.eval_every=1000", "--config.train.eval_batches=1",
         "--config.sample.num=0"]


def test_passages_and_pairs():
  documents = [list(range(100)), list(range(40)), list(range(64)), list(range(10)), list(range(70))]
  cut = probe.passages(documents)
  assert [len(c) for c in cut] == [3, 2, 2]  # 100 // 32, 64 // 32, 70 // 32; shorter ones have no pair.
  assert (cut[0][1] == np.arange(32, 64)).all()
  rng = np.random.default_rng(0)
  counts = [5, 3, 4, 2, 6]
  rows = probe.pairs(counts, np.array([0, 2, 4]), rng)
  assert len(rows) == 3 * 2 * probe.PAIRS_PER_DOCUMENT and rows[:, 4].mean() == 0.5  # Balanced.
  same, other = rows[rows[:, 4] == 1], rows[rows[:, 4] == 0]
  assert (same[:, 0] == same[:, 2]).all() and (same[:, 1] != same[:, 3]).all()  # Two passages of one document.
  assert (other[:, 0] != other[:, 2]).all() and set(other[:, 2]) <= {0, 2, 4}  # Another document of the side.
  assert all(r[1] < counts[r[0]] and r[3] < counts[r[2]] for r in rows)


def test_the_classifier_separates_what_is_linearly_separable():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(400, 5))
  y = (x[:, 1] - 0.5 * x[:, 3] > 0.2).astype(int)
  ridge = probe.choose_ridge(x, y, np.arange(400))
  assert ridge in probe.RIDGES
  assert np.mean(probe.fit_ridge(x, y, ridge)(x) == y) > 0.95


@pytest.mark.parametrize("objective", ["clm", "span_corruption", "nsp", "electra", "contrastive"])
def test_representations_are_the_final_hidden_states(objective):
  run = tiny_run(f"--config.data.objective={objective}", "--config.data.inputs_length=16",
                 "--config.data.targets_length=8", "--config.model.dropout=0.1")
  params = run.create_state().params
  tokens = np.arange(3, 3 + 2 * 16, dtype=np.int32).reshape(2, 16)
  with run.activated():
    hidden = run.family.representations(run.model, params, tokens)
  assert hidden.shape == (2, 16, run.cfg.model.d_model)
  assert np.isfinite(np.asarray(hidden)).all()


def test_the_classifier_takes_many_classes():
  rng = np.random.default_rng(0)
  centres = rng.normal(size=(5, 8)) * 3
  y = rng.integers(0, 5, 600)
  x = centres[y] + rng.normal(size=(600, 8))
  assert np.mean(probe.fit_ridge(x, y, 1.0, classes=5)(x) == y) > 0.9


def test_the_probe_reads_documents_no_run_trained_on(corpus_source, vocabulary, cache_dir):
  run = run_lib.Run.build(tiny_config(f"--config.data.cache_dir={cache_dir}"), vocabulary=vocabulary)
  split, documents = probe.run_documents(run)
  assert split == "downstream" and len(documents) > 250
  held_out = set(corpus_source.texts("downstream"))
  assert not held_out & set(corpus_source.texts("train")) and not held_out & set(corpus_source.texts("validation"))
  assert {vocabulary.decode(d) for d in documents[:50]} <= held_out
  assert len(held_out) == sum(corpus.split_of(t) == "downstream" for t in corpus.documents())


def test_the_labelled_task_splits_share_no_document(vocabulary):
  names, splits = topics.task(vocabulary)
  assert len(names) >= 20 and "email" in names and "pydoc" not in names
  texts = {split: set(data.texts) for split, data in splits.items()}
  assert not texts["train"] & texts["validation"] and not texts["train"] & texts["test"]
  assert not texts["validation"] & texts["test"]
  assert all(corpus.split_of(t) == "downstream" for t in texts["test"]) and len(texts["test"]) > 150
  for data in splits.values():
    assert len(data.documents) == len(data.labels) and set(data.labels) <= set(range(len(names)))
    assert all(1 <= len(d) <= topics.PASSAGES and d.shape[1] == probe.PASSAGE_TOKENS for d in data.documents)


def test_finetuning_trains_the_model_and_its_head():
  """On a task that the tokens of a passage decide (each class its own range of ids)."""
  run = tiny_run(vocab_size=128)
  rng = np.random.default_rng(0)

  def split(n):
    labels = rng.integers(0, 3, n)
    documents = [(10 + 30 * label + rng.integers(0, 20, (2, probe.PASSAGE_TOKENS))).astype(np.int32)
                 for label in labels]
    return topics.Split(documents, labels, ())

  params = run.create_state().params
  with run.activated():
    result = finetune.finetune(run.family, run.model, params, ["a", "b", "c"],
                               {"train": split(64), "validation": split(16), "test": split(32)}, steps=60, batch=8,
                               learning_rate=1e-2)
  assert result["accuracy"] > 0.9 and result["validation_accuracy"] > 0.9


@pytest.mark.slow
def test_the_probe_command_reports_the_model_beside_its_initial_parameters(run_train, tmp_path, capsys):
  """On held-out documents, with intervals over seeds; on the zero-shot tasks and the package task a trained
  model beats its initial parameters (on the same-document probe it need not at this size:
  docs/compare_objectives.md)."""
  workdir = tmp_path / "run"
  result = run_train(workdir, *SMALL)
  assert result.returncode == 0, result.stderr
  probe_command.main([f"--workdir={workdir}", "--limit=100"])  # Each task's first 100 items (of 134 to 400).
  saved = json.loads((workdir / "eval" / "probe-zero_shot-limit100-step300.json").read_text())  # Part: apart.
  trained, initial = saved["rows"]["model (step 300)"], saved["rows"]["random init"]
  assert saved["version"] == zero_shot.VERSION and set(saved["items"].values()) == {100}
  # pairs_lines' texts (43 to 104 tokens) are longer than the run's rows of 64: not scored, and said why.
  assert set(trained) == set(saved["chance"]) == {"pairs_swap", "pairs_replace", "cloze"}
  assert "more than the 64 positions it trained at" in saved["not_scored"]["pairs_lines"]
  assert trained["pairs_swap"][0] > initial["pairs_swap"][0] + 0.2 and trained["cloze"][0] > 0.3, saved
  printed = capsys.readouterr().out
  assert re.search(r"chance +0\.500 +0\.500 +0\.250\n  pairs_lines not scored: \d+ of 200 requests", printed)
  probe_command.main([f"--workdir={workdir}", "--task=same_document", "--seeds=3"])
  saved = json.loads((workdir / "eval" / "probe-same_document-step300.json").read_text())
  assert saved["split"] == "downstream" and saved["test_pairs"] > 500
  trained, initial = saved["rows"]["model (step 300)"], saved["rows"]["random init"]
  assert len(trained["same_document_probe"]) == len(initial["same_document_probe"]) == 3
  out = capsys.readouterr().out
  assert re.search(rf"random init +{re.escape(stats.text(initial['same_document_probe']))}\n", out), out
  probe_command.main([f"--workdir={workdir}", "--task=packages", "--finetune", "--seeds=1", "--finetune_steps=5",
                      "--finetune_lr=1e-3"])
  saved = json.loads((workdir / "eval" / "probe-packages-step300.json").read_text())
  assert saved["finetune_lr"] == 1e-3
  assert set(saved["rows"]["random init"]) == {"package_probe", "package_finetune"} and saved["classes"] >= 20
  trained, initial = saved["rows"]["model (step 300)"], saved["rows"]["random init"]
  assert trained["package_probe"][0] > initial["package_probe"][0] + 0.05, (trained, initial)


@pytest.mark.slow
@pytest.mark.parametrize("flags, said", [
    (["--task=packages", "--finetune_lr=1e-3"], "--finetune_lr=0.001 is the fine-tuning's rate; add --finetune"),
    (["--task=packages", "--finetune_steps=50"], "--finetune_steps=50 counts the fine-tuning's steps; add --finetune"),
    (["--task=zero_shot", "--split=validation"], "--split chooses the same-document probe's documents"),
    (["--task=packages", "--documents=100"], "--documents chooses the same-document probe's documents"),
    (["--task=zero_shot", "--seeds=3"], "--seeds: --task=zero_shot draws nothing"),
    (["--task=packages", "--seeds=3"], "--seeds: --task=packages without --finetune draws nothing")])
def test_a_flag_the_measure_does_not_read_is_refused(trained_run, capsys, flags, said):
  with pytest.raises(SystemExit):
    probe_command.main([f"--workdir={trained_run}", *flags])
  assert said in capsys.readouterr().err
