"""The downstream probe (pretrain/train/probe.py, `pretrain probe`): its pairs, its classifier, and a model
trained on the corpus probing better than its initial parameters."""

import json

import numpy as np
import pytest

from pretrain.commands import probe as probe_command
from pretrain.train import probe
from tests.conftest import tiny_run

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


def test_a_trained_model_probes_better_than_its_initial_parameters(run_train, tmp_path, capsys):
  workdir = tmp_path / "run"
  result = run_train(workdir, *SMALL)
  assert result.returncode == 0, result.stderr
  probe_command.main([f"--workdir={workdir}"])
  probe_command.main([f"--workdir={workdir}", "--random_init"])
  trained = json.loads((workdir / "eval" / "probe-step300.json").read_text())
  initial = json.loads((workdir / "eval" / "probe-random-init.json").read_text())
  assert trained["test_pairs"] == initial["test_pairs"] > 4000
  assert trained["accuracy"] > initial["accuracy"] + 0.01, (trained, initial)
  out = capsys.readouterr().out
  assert f"test accuracy {trained['accuracy']:.3f} (chance 0.5)" in out
