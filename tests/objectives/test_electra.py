"""ELECTRA: the generator's samples replace the masked tokens, the discriminator's labels say where they differ,
both losses fall on a fixed batch, and the discriminator exports."""

import json
import os

import flax
import jax
import numpy as np
import pytest
import safetensors.numpy

from pretrain.models import electra
from pretrain.parallel import mesh as mesh_lib
from tests import numerics
from tests.conftest import tiny_run

VOCAB = 128


def _batch(rows: int = 4, length: int = 32, seed: int = 0) -> dict:
  """MLM-shaped rows: random tokens, 15% of them masked (id 3), the last row half padding."""
  rng = np.random.default_rng(seed)
  targets = rng.integers(4, VOCAB, (rows, length)).astype(np.int32)
  segments = np.ones((rows, length), np.int32)
  segments[-1, length // 2:] = 0
  targets *= segments
  weights = ((rng.random((rows, length)) < 0.15) & (segments > 0)).astype(np.int32)
  return {"encoder_input_tokens": np.where(weights > 0, 3, targets).astype(np.int32), "encoder_target_tokens": targets,
          "encoder_loss_weights": weights, "encoder_segment_ids": segments,
          "encoder_positions": np.tile(np.arange(length, dtype=np.int32), (rows, 1)) * segments}


@pytest.fixture(scope="module")
def run():
  return tiny_run("--config.data.objective=electra", "--config.optimizer.learning_rate=3e-3",
                  "--config.optimizer.warmup_steps=1", "--config.train.steps=30", vocab_size=VOCAB)


@pytest.mark.slow
def test_replaced_positions_are_where_the_sample_differs(run):
  batch = _batch()
  params = run.create_state().params
  key = jax.random.key(7)
  sample_key, _ = jax.random.split(key)
  out, _ = run.family.forward(run.model, params, batch, key)  # (outputs, what MoE layers sowed)
  masked = batch["encoder_loss_weights"] > 0
  sampled = np.asarray(jax.random.categorical(sample_key, out["generator_logits"]))
  corrupted = np.asarray(out["corrupted"])
  np.testing.assert_array_equal(corrupted[masked], sampled[masked])
  np.testing.assert_array_equal(corrupted[~masked], batch["encoder_target_tokens"][~masked])
  labels = np.asarray(electra.replaced(corrupted, batch["encoder_target_tokens"], batch["encoder_loss_weights"]))
  np.testing.assert_array_equal(labels, masked & (sampled != batch["encoder_target_tokens"]))
  # A sample equal to the original counts as original.
  same = electra.replaced(np.array([[5, 6, 7]]), np.array([[5, 9, 7]]), np.array([[1, 1, 0]]))
  np.testing.assert_array_equal(same, [[False, True, False]])
  # The sums count those labels: recall's denominator is the replaced tokens.
  sums = run.family.loss_sums(run.model, params, batch, run.cfg.loss, key)
  assert float(sums["replaced"]) == labels.sum() > 0
  assert float(sums["tokens"]) == batch["encoder_segment_ids"].sum()


@pytest.mark.slow
def test_a_few_steps_lower_both_losses_on_a_fixed_batch(run):
  batch = mesh_lib.global_batch(_batch(rows=8), run.batch_sharding)
  with run.activated():
    state = run.create_state()
    history = []
    for _ in range(30):
      state, metrics = run.train_step(state, batch)
      history.append({k: float(v) for k, v in metrics.items()})
  for name in ("generator_loss", "discriminator_loss"):
    first, last = history[0][name], np.mean([h[name] for h in history[-3:]])
    assert last < 0.8 * first, (name, first, last)
  expected = history[-1]["generator_loss"] + 50.0 * history[-1]["discriminator_loss"]
  numerics.assert_close(history[-1]["loss"], expected + history[-1]["z_loss"], terms=8 * 32)  # Means over tokens.


def test_generator_size_sets_its_width():
  c = tiny_run("--config.data.objective=electra", "--config.model.num_heads=4", "--config.model.num_kv_heads=4",
               "--config.model.electra_generator_size=0.5", vocab_size=VOCAB).model
  g = electra.generator_config(c.config, c.generator_size)
  assert (g.num_heads, g.d_model, g.mlp_dim, g.num_layers) == (2, 16, 32, c.config.num_layers)  # Half of 32 wide.


def test_the_discriminator_exports_and_reads_back(run, tmp_path):
  from pretrain import hf  # pylint: disable=g-import-not-at-top
  params = run.create_state().params
  state = {k: np.ascontiguousarray(v) for k, v in hf.electra.to_hf(jax.device_get(params), run.cfg.model).items()}
  path = tmp_path / "model.safetensors"
  safetensors.numpy.save_file(state, str(path))
  back = hf.electra.from_hf(safetensors.numpy.load_file(str(path)), run.cfg.model)
  tokens = _batch()["encoder_target_tokens"]
  segments, positions = np.ones_like(tokens), np.tile(np.arange(tokens.shape[1]), (len(tokens), 1))
  ours = run.model.apply({"params": params}, tokens, segments, positions, method="discriminate")
  read = run.model.apply({"params": {**params, **back}}, tokens, segments, positions, method="discriminate")
  np.testing.assert_array_equal(ours[0], read[0])
  assert not any(k.startswith("lm_head") or "generator" in k for k in state)
  config = hf.electra.hf_config(run.cfg.model, VOCAB, 32)
  assert config["architectures"] == ["PretrainElectraDiscriminator"] and config["is_causal"] is False
  assert json.loads(json.dumps(config)) == config and os.path.getsize(path) > 0


def test_a_generator_larger_than_the_discriminator_is_refused():
  from pretrain.system.errors import UserError  # pylint: disable=g-import-not-at-top
  with pytest.raises(UserError, match="electra_generator_size=1.5 makes the generator larger than the discriminator"):
    tiny_run("--config.data.objective=electra", "--config.model.electra_generator_size=1.5")


def test_generator_heads_that_do_not_split_over_the_tensor_axis_are_refused():
  from pretrain.system.errors import UserError  # pylint: disable=g-import-not-at-top
  with pytest.raises(UserError, match="generator's 1 attention heads .* do not split over mesh.tensor=2"):
    tiny_run("--config.data.objective=electra", "--config.mesh.tensor=2", "--config.mesh.data=1")


def test_the_generator_has_the_configured_share_of_the_width(capsys):
  """ELECTRA scales the generator's hidden size: a quarter of a 2-head, 32-wide discriminator is 8 wide (rounding
  to whole heads would give it one 16-wide head: half the width)."""
  run = tiny_run("--config.data.objective=electra", "--config.model.electra_generator_size=0.25", vocab_size=VOCAB)
  assert "ELECTRA generator (model.electra_generator_size=0.25): width 8 of 32, feed-forward 16 of 64, 1 heads of 2" \
      in capsys.readouterr().out
  params = flax.linen.meta.unbox(run.abstract_state().params)
  assert params["generator_in"]["kernel"].shape == (32, 8)
  assert params["generator"]["layer_0"]["mlp"]["wi_0"]["kernel"].shape == (8, 16)
  assert params["generator"]["layer_0"]["attention"]["query"].shape == (8, 1, 16)
