"""The contrastive objective (unsupervised SimCSE) computes InfoNCE over in-batch negatives, and refuses what
cannot work; the 8-device run's losses are checked in tests/parallel/test_mesh_layouts.py."""

import jax
import numpy as np
import pytest

from pretrain.system.errors import UserError
from tests import numerics
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
  # The encoder, then a mean over 32 tokens, a norm and dot products of 32, InfoNCE's sums over 3 rows.
  terms = numerics.transformer_terms(run.model.config, 32) + 3 * 32 + 2 * 3
  numerics.assert_differs(z1, z2, terms=terms)  # dropout made two views
  similarity = z1 @ z2.T / 0.5
  infonce = np.log(np.exp(similarity).sum(-1)) - np.diag(similarity)
  assert sums["weight"] == 3
  numerics.assert_close(sums["loss"], infonce.sum(), terms=terms, magnitude=np.abs(similarity).max() * 3)
  assert sums["correct"] == (similarity.argmax(-1) == np.arange(3)).sum()
  numerics.assert_close(sums["alignment"], np.square(z1 - z2).sum(), terms=terms, magnitude=np.square(z1).sum())
  distance = np.square(z1[:, None] - z1[None]).sum(-1)
  off_diagonal = ~np.eye(3, dtype=bool)
  assert sums["pairs"] == 6
  numerics.assert_close(sums["uniformity"], np.exp(-2 * distance)[off_diagonal].sum(), terms=terms)
  metrics = run.family.eval_metrics(sums)
  numerics.assert_close(metrics["uniformity"], np.log(np.exp(-2 * distance)[off_diagonal].mean()), terms=terms,
                        magnitude=1.0)  # A log's error is the relative error of what it takes.


@pytest.mark.parametrize("flags, expected", [
    (("--config.model.dropout=0.1", "--config.train.batch_size=1"), "train.batch_size=1 has none: use at least 2"),
    ((), "set model.dropout above 0"),
    (("--config.model.dropout=0.1", "--config.train.microbatches=2"), "set train.microbatches=1"),
])
def test_what_cannot_work_is_refused(flags, expected):
  with pytest.raises(UserError, match=expected):
    tiny_run("--config.data.objective=contrastive", *flags)


MLM_THEN_CONTRASTIVE = ("--config.data.objective=mlm", "--config.model.dropout=0.1",
                        "--config.data.schedule=((0, (('mlm', 1.0),), 'ramp'), (4, (('contrastive', 1.0),)))")


def test_mlm_beside_contrastive_sums_each_loss_over_its_own_rows():
  """A schedule of mlm and contrastive trains one encoder (WithMLM): its loss is MLM's over the MLM rows plus
  InfoNCE's over the contrastive rows, each what the objective's own family computes on those rows alone."""
  from pretrain import families  # pylint: disable=g-import-not-at-top
  from pretrain.objectives import contrastive  # pylint: disable=g-import-not-at-top
  run = tiny_run(*MLM_THEN_CONTRASTIVE, vocab_size=VOCAB)
  assert isinstance(run.family, contrastive.WithMLM) and run.members_reported == 2
  batch = run.family.random_batch(4, run.task_lengths, VOCAB)
  batch["encoder_loss_weights"][:, ::2] = 0
  batch["encoder_loss_weights"][2:] = 0  # Rows 2 and 3 are contrastive: no token carries a loss.
  batch["member"] = np.repeat(np.array([[0], [0], [1], [1]], np.int32), 32, axis=1)
  params = run.create_state().params
  key = jax.random.key(5)
  train = run.family.loss_sums(run.model, params, batch, run.cfg.loss, key, members=2)
  evaluated = run.family.loss_sums(run.model, params, batch, run.cfg.loss)

  mlm_model = families.ENCODER_ONLY.build(run.cfg.model, VOCAB)
  mlm = families.ENCODER_ONLY.loss_sums(mlm_model, params, batch, run.cfg.loss)
  contrastive_rows = {**batch, "encoder_segment_ids": batch["encoder_segment_ids"] * (batch["member"] == 1)}
  alone = contrastive.Contrastive.family
  info_nce = {k: alone.loss_sums(alone.build(run.cfg.model, VOCAB), params, contrastive_rows, run.cfg.loss, r)
              for k, r in (("train", key), ("eval", None))}
  # The encoder, then sums over the vocabulary and the batch's 4 x 32 tokens.
  terms = numerics.transformer_terms(run.model.config, 32) + VOCAB + 4 * 32
  numerics.assert_close(evaluated["cross_entropy"], mlm["cross_entropy"], terms=terms)
  for sums, kind in ((train, "train"), (evaluated, "eval")):
    assert float(sums["contrastive_weight"]) == 2
    numerics.assert_close(sums["contrastive_loss"], info_nce[kind]["loss"], terms=terms)
  metrics = jax.device_get(run.family.train_metrics(train))
  numerics.assert_close(metrics["loss"], (train["cross_entropy"] + train["z_loss"]) / train["weight"]
                        + info_nce["train"]["loss"] / 2, terms=terms)
  numerics.assert_close(metrics["member_loss"], np.array([train["cross_entropy"] / train["weight"],
                                                          info_nce["train"]["loss"] / 2]), terms=terms)
  assert metrics["member_weight"].tolist() == [float(train["weight"]), 2.0]


@pytest.mark.slow
def test_mlm_then_contrastive_trains_and_evaluates_each_member(cache_dir, vocabulary):
  """On the corpus: the ramp's batches name each row's member, the step reports each member's loss, and the
  evaluation of each member's task reports its own metrics."""
  del vocabulary
  from pretrain import run as run_lib  # pylint: disable=g-import-not-at-top
  from pretrain.parallel import mesh as mesh_lib  # pylint: disable=g-import-not-at-top
  from pretrain.train import evaluation  # pylint: disable=g-import-not-at-top
  from tests.conftest import tiny_config  # pylint: disable=g-import-not-at-top
  run = run_lib.Run.build_with_data(tiny_config(f"--config.data.cache_dir={cache_dir}", *MLM_THEN_CONTRASTIVE,
                                                "--config.train.batch_size=8"))
  batches = run.train_batches(step=2)  # Halfway through the ramp: both members' rows.
  batch = next(batches)
  assert set(np.unique(batch["member"])) == {0, 1}
  contrastive_rows = batch["member"][:, 0] == 1
  assert not batch["encoder_loss_weights"][contrastive_rows].any()
  with run.activated():
    _, step_metrics = run.train_step(run.create_state(), mesh_lib.global_batch(batch, run.batch_sharding))
    results = evaluation.evaluate_all(run, run.create_state().params, evaluation.eval_sets(run))
  assert np.all(np.asarray(step_metrics["member_weight"]) > 0) and np.isfinite(step_metrics["loss"])
  assert {"eval/loss", "eval/accuracy", "eval/bits_per_byte"} <= set(results)
  assert "eval/contrastive_loss" not in results
  assert {"eval/corpus_contrastive/contrastive_accuracy", "eval/corpus_contrastive/uniformity"} <= set(results)
  assert results["eval/corpus_contrastive/loss"] == results["eval/corpus_contrastive/contrastive_loss"]


def test_contrastive_beside_another_family_is_refused():
  with pytest.raises(UserError, match="cannot share"):
    tiny_run("--config.data.objective=nsp", "--config.model.dropout=0.1",
             "--config.data.schedule=((0, (('nsp', 1.0),)), (4, (('contrastive', 1.0),)))")
