"""Every config of the zoo builds: its model abstractly (no parameter is
allocated), its mesh for the device count it was sized for, and its data
pipeline's spec. The large ones have their published parameter counts."""

import math

import jax
import jax.numpy as jnp
import pytest

from pretrain import cli, configs, models, objectives
from pretrain.parallel import mesh as mesh_lib

# Config -> (devices it was sized for, published parameter count or None).
ZOO = {
    "t5_1_1_small": (8, 77e6), "t5_1_1_base": (8, 248e6), "t5_1_1_large": (32, 783e6), "t5_1_1_xl": (64, 2.85e9),
    "t5_1_1_xxl": (256, 11.3e9), "ul2_small": (8, 77e6), "ul2_20b": (512, 20e9), "lm_125m": (8, 125e6),
    "lm_350m": (8, 350e6), "lm_1b": (32, 1.1e9), "lm_7b": (256, 6.74e9), "ul2_decoder_1b": (32, 1.1e9),
    "mlm_base": (8, 110e6), "switch_base_8": (8, 619e6), "mixtral_8x7b": (256, 46.7e9),
}


@pytest.mark.parametrize("name", ZOO)
def test_zoo_config_builds_without_allocating(name):
  devices, published = ZOO[name]
  cfg = configs.load(name)
  objectives.validate(cfg)
  family = objectives.get(cfg.data.objective).family
  family.check(cfg)
  model = family.build(cfg.model, cfg.tokenizer.vocab_size)
  args = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in family.example_args(family.task_lengths(cfg.data))]
  shapes = jax.eval_shape(lambda *a: model.init(jax.random.key(0), *a), *args)["params"]
  count = sum(math.prod(leaf.value.shape if hasattr(leaf, "value") else leaf.shape)
              for leaf in jax.tree.leaves(shapes, is_leaf=lambda x: hasattr(x, "value")))
  print(f"{name}: {count:,} parameters (published {published:,.0f})")
  assert count == pytest.approx(published, rel=0.05)
  sizes = dict(zip(mesh_lib.AXES, mesh_lib.mesh_shape(cfg.mesh, devices)))
  mesh_lib.rules(cfg.mesh)
  assert cfg.train.batch_size % (cfg.train.microbatches * sizes["data"] * sizes["fsdp"]) == 0
  assert cfg.data.source == "tfds" and cfg.data.tfds_name == "c4/en:3.1.0"
  assert jnp.dtype(models.activation_dtype(cfg.model.dtype, "tpu")) == jnp.bfloat16


def _parse(argv):
  import argparse  # pylint: disable=g-import-not-at-top
  return cli.parse_command_line(argparse.ArgumentParser(), argv)[1]


@pytest.mark.parametrize("name", ZOO)
def test_gin_twin_resolves_to_the_same_config(name):
  assert _parse([f"--gin_file=configs/gin/{name}.gin"]).to_dict() == _parse([f"--config=configs/{name}.py"]).to_dict()


@pytest.mark.parametrize("name", ZOO)
def test_tiny_gin_shrinks_every_zoo_run_to_the_bundled_corpus(name):
  """--gin_file=NAME --gin_file=tiny: the zoo run's objective and optimizer, a model of a few hundred thousand
  parameters on the bundled corpus, one device, a batch that fits a laptop."""
  from pretrain import run as run_lib  # pylint: disable=g-import-not-at-top
  from pretrain.train import memory  # pylint: disable=g-import-not-at-top
  cfg = _parse([f"--gin_file={name}", "--gin_file=tiny"])
  zoo = configs.load(name)
  assert (cfg.data.objective, cfg.optimizer.name) == (zoo.data.objective, zoo.optimizer.name)
  assert cfg.data.source == "corpus" and cfg.train.batch_size == 16
  run = run_lib.Run.build(cfg, cfg.tokenizer.vocab_size)
  assert sum(x.size for x in jax.tree.leaves(run.abstract_state().params)) < 3e6
  assert memory.lower_bound(run) < 2**30


def test_gin_macros_includes_flags_and_errors(tmp_path):
  from pretrain.errors import UserError  # pylint: disable=g-import-not-at-top
  (tmp_path / "base.gin").write_text("WIDTH = 96\nmodel.d_model = %WIDTH\n")
  (tmp_path / "run.gin").write_text("include 'base.gin'\nmodel.mlp_dim = 384\ntrain.steps = 7\n")
  cfg = _parse([f"--gin_file={tmp_path / 'run.gin'}", "--gin.train.batch_size=8", "--gin.data.objective=ul2"])
  assert (cfg.model.d_model, cfg.model.mlp_dim, cfg.train.steps, cfg.train.batch_size) == (96, 384, 7, 8)
  assert cfg.data.objective == "ul2"
  (tmp_path / "typo.gin").write_text("model.d_modle = 3\n")
  with pytest.raises(UserError, match=r"gin binding model.d_modle \(.*typo.gin, line 1\): unknown config key "
                                      r"'model.d_modle'; did you mean model.d_model\?"):
    _parse([f"--gin_file={tmp_path / 'typo.gin'}"])
  (tmp_path / "broken.gin").write_text("model.d_model = (3\n")
  with pytest.raises(UserError, match="gin syntax error"):
    _parse([f"--gin_file={tmp_path / 'broken.gin'}"])
  (tmp_path / "syntax.py").write_text("def get_config(:\n")
  with pytest.raises(UserError, match="has a syntax error at line 1"):
    _parse([f"--config={tmp_path / 'syntax.py'}"])
