"""The contrastive objective (unsupervised SimCSE) computes InfoNCE over in-batch negatives, and refuses what
cannot work; the 8-device run's losses are checked in tests/test_mesh_layouts.py."""

import jax
import numpy as np
import pytest

from pretrain.errors import UserError
from tests.conftest import tiny_run

VOCAB = 128


def test_the_loss_is_infonce_by_hand():
  run = tiny_run("--config.data.objective=contrastive", "--config.model.dropout=0.1",
                 "--config.loss.contrastive_temperature=0.5", vocab_size=VOCAB)
  rng = np.random.default_rng(0)
  tokens = rng.integers(3, VOCAB, (4, 32)).astype(np.int32)
  segments = np.ones_like(tokens)
  segments[1, 20:] = 0  # A short row,
  segments[3] = 0       # and a padding row, which is no example and no negative.
  tokens *= segments
  batch = {"encoder_input_tokens": tokens, "encoder_target_tokens": tokens, "encoder_loss_weights": 0 * tokens,
           "encoder_segment_ids": segments, "encoder_positions": np.tile(np.arange(32), (4, 1)) * segments}
  params = run.create_state().params
  key = jax.random.key(3)
  sums = {k: float(v) for k, v in run.family.loss_sums(run.model, params, batch, run.cfg.loss, key).items()}

  views = []
  for view_key in jax.random.split(key):  # The two dropout views, as the family draws them.
    h = np.asarray(run.model.apply({"params": params}, tokens, segments, batch["encoder_positions"],
                                   deterministic=False, rngs={"dropout": view_key}), np.float64)
    pooled = np.stack([h[i][segments[i] > 0].mean(0) for i in range(3)])
    views.append(pooled / np.linalg.norm(pooled, axis=-1, keepdims=True))
  z1, z2 = views
  assert not np.allclose(z1, z2)  # dropout made two views
  similarity = z1 @ z2.T / 0.5
  infonce = np.log(np.exp(similarity).sum(-1)) - np.diag(similarity)
  assert sums["weight"] == 3
  assert sums["loss"] == pytest.approx(infonce.sum(), rel=1e-4)
  assert sums["correct"] == (similarity.argmax(-1) == np.arange(3)).sum()
  assert sums["alignment"] == pytest.approx(np.square(z1 - z2).sum(), rel=1e-4)
  distance = np.square(z1[:, None] - z1[None]).sum(-1)
  off_diagonal = ~np.eye(3, dtype=bool)
  assert sums["pairs"] == 6
  assert sums["uniformity"] == pytest.approx(np.exp(-2 * distance)[off_diagonal].sum(), rel=1e-4)
  metrics = run.family.eval_metrics(sums)
  assert metrics["uniformity"] == pytest.approx(np.log(np.exp(-2 * distance)[off_diagonal].mean()), rel=1e-4)


@pytest.mark.parametrize("flags, expected", [
    (("--config.model.dropout=0.1", "--config.train.batch_size=1"), "train.batch_size=1 has none: use at least 2"),
    ((), "set model.dropout above 0"),
    (("--config.model.dropout=0.1", "--config.train.microbatches=2"), "set train.microbatches=1"),
])
def test_what_cannot_work_is_refused(flags, expected):
  with pytest.raises(UserError, match=expected):
    tiny_run("--config.data.objective=contrastive", *flags)
