"""Every config of the zoo builds: its model abstractly (no parameter is
allocated), its mesh for the device count it was sized for, and its data
pipeline's spec. The large ones have their published parameter counts, and each
fits the hardware it says it is sized for."""

import importlib
import math
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from pretrain import cli, configs, models, objectives
from pretrain.parallel import mesh as mesh_lib, tpu
from tests.conftest import fake_devices

# Config -> published parameter count.
ZOO = {
    "t5_1_1_small": 77e6, "t5_1_1_base": 248e6, "t5_1_1_large": 783e6, "t5_1_1_xl": 2.85e9, "t5_1_1_xxl": 11.3e9,
    "ul2_small": 77e6, "ul2_20b": 20e9, "lm_125m": 125e6, "lm_350m": 350e6, "lm_1b": 1.1e9, "lm_1b_128k": 1.1e9,
    "lm_7b": 6.74e9,
    "ul2_decoder_1b": 1.1e9, "mlm_base": 110e6, "switch_base_8": 619e6, "mixtral_8x7b": 46.7e9,
}


def _module(name):
  return importlib.import_module(f"pretrain.configs.{name}")


@pytest.mark.parametrize("name", ZOO)
def test_zoo_config_builds_without_allocating(name):
  devices, published = _module(name).SIZED_FOR.devices, ZOO[name]
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


def test_every_config_of_the_zoo_says_what_it_is_sized_for():
  assert sorted(name for name in configs.names() if hasattr(_module(name), "SIZED_FOR")) == sorted(ZOO)


_LOWER_BOUNDS = """
import argparse, importlib, sys
from pretrain import cli, run as run_lib
from pretrain.train import memory
for name in sys.argv[1:]:
  flags = importlib.import_module(f"pretrain.configs.{name}").SIZED_FOR.flags
  cfg = cli.parse_command_line(argparse.ArgumentParser(), [f"--config={name}", *flags])[1]
  cfg.model.dtype = "bfloat16"
  print("GiB", name, memory.lower_bound(run_lib.Run.build(cfg)) / 2**30)
"""


@pytest.fixture(scope="module")
def lower_bounds():
  """GiB per device that each zoo run needs at the least (parameters, optimizer state, one microbatch's logits and
  attention scores), on the devices it is sized for, with the flags its figure was measured with: a process per
  device count, all at once."""
  by_count = {}
  for name in ZOO:
    by_count.setdefault(_module(name).SIZED_FOR.devices, []).append(name)
  processes = [subprocess.Popen(
      [sys.executable, "-c", _LOWER_BOUNDS, *names], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env=fake_devices(count))
      for count, names in by_count.items()]
  result = {}
  for process in processes:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]
    result.update((name, float(gib)) for _, name, gib in (line.split() for line in out.splitlines()
                                                          if line.startswith("GiB ")))
  return result


@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO)
def test_zoo_config_fits_the_hardware_it_is_sized_for(name, lower_bounds):
  """The config's recorded `pretrain estimate-memory` figure (tools/zoo_memory.py measures it again, compiled)
  fits one device of its hardware, is not below what the run needs at the least, and is what its docstring says."""
  s = _module(name).SIZED_FOR
  assert lower_bounds[name] <= s.estimate_gib <= s.device_gib
  doc = " ".join(_module(name).__doc__.split())
  assert f"Sized for {s.hardware}" in doc and f"{s.estimate_gib} GiB" in doc


@pytest.mark.parametrize("name", ZOO)
def test_zoo_config_records_its_step_compiled_for_its_tpu_slice(name):
  """The TPU slice a config names and what libtpu's compilation of its step takes per chip there
  (tools/zoo_compile.py measures it again): within the chip's HBM, and what its docstring says."""
  s = _module(name).SIZED_FOR
  assert s.tpu and 0 < s.tpu_gib <= tpu.target(s.tpu).chip.hbm_bytes / 2**30
  doc = " ".join(_module(name).__doc__.split())
  assert f"compiled for a {s.tpu}" in doc and f"{s.tpu_gib} GiB per chip" in doc


def _parse(argv):
  import argparse  # pylint: disable=g-import-not-at-top
  return cli.parse_command_line(argparse.ArgumentParser(), argv)[1]


@pytest.mark.parametrize("name", [*ZOO, "quickstart_moe", "ptb_small", "ptb_medium"])
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


def test_gin_macros_includes_flags_and_errors(tmp_path, monkeypatch):
  from pretrain.system.errors import UserError  # pylint: disable=g-import-not-at-top
  (tmp_path / "base.gin").write_text("WIDTH = 96\nmodel.d_model = %WIDTH\n")
  (tmp_path / "run.gin").write_text("include 'base.gin'\nmodel.mlp_dim = 384\ntrain.steps = 7\n")
  cfg = _parse([f"--gin_file={tmp_path / 'run.gin'}", "--gin.train.batch_size=8", "--gin.data.objective=ul2"])
  assert (cfg.model.d_model, cfg.model.mlp_dim, cfg.train.steps, cfg.train.batch_size) == (96, 384, 7, 8)
  assert cfg.data.objective == "ul2"
  # Macros resolve once everything is read, as gin's do: a later file or flag changes one an included file uses,
  # inside tuples too; a flag's macro that no binding uses is refused (a mistyped SECTION.FIELD).
  (tmp_path / "wider.gin").write_text("include 'base.gin'\nWIDTH = 128\nSTEP = 3\ntrain.profile_steps = (%STEP, 5)\n")
  cfg = _parse([f"--gin_file={tmp_path / 'wider.gin'}"])
  assert (cfg.model.d_model, tuple(cfg.train.profile_steps)) == (128, (3, 5))
  cfg = _parse([f"--gin_file={tmp_path / 'wider.gin'}", "--gin.WIDTH=64", "--gin.STEP=2"])
  assert (cfg.model.d_model, tuple(cfg.train.profile_steps)) == (64, (2, 5))
  with pytest.raises(UserError, match="--gin.TRAIN_STEPS=5 defines the macro TRAIN_STEPS, which no binding uses"):
    _parse([f"--gin_file={tmp_path / 'run.gin'}", "--gin.TRAIN_STEPS=5"])
  with pytest.raises(UserError, match="--gin.train.steps has no value; write --gin.train.steps=VALUE"):
    _parse(["--gin.train.steps", "100"])
  # An include's path is looked for from its file's folder, then, as gin and T5X look, from the current directory
  # and --gin_search_paths; a file in none of them is named with where it was looked for.
  (tmp_path / "nested").mkdir()
  (tmp_path / "nested" / "from_cwd.gin").write_text("include 'base.gin'\ninclude 'nested/deeper.gin'\n")
  (tmp_path / "nested" / "deeper.gin").write_text("train.steps = 9\n")
  (tmp_path / "shared").mkdir()
  (tmp_path / "shared" / "common.gin").write_text("model.mlp_dim = 192\n")
  (tmp_path / "nested" / "searched.gin").write_text("include 'common.gin'\n")
  with monkeypatch.context() as m:
    m.chdir(tmp_path)
    cfg = _parse(["--gin_file=nested/from_cwd.gin"])
    assert (cfg.model.d_model, cfg.train.steps) == (96, 9)
    cfg = _parse(["--gin_file=nested/searched.gin", "--gin_search_paths=elsewhere,shared"])
    assert cfg.model.mlp_dim == 192
    with pytest.raises(UserError, match=r"searched.gin: the included gin file 'common.gin' is in none of "
                                        r"'nested', '\.', '.*configs/gin'; .*--gin_search_paths"):
      _parse(["--gin_file=nested/searched.gin"])
  # A built-in gin file, included by its name (as --gin_file takes it), under a user's own bindings.
  (tmp_path / "small.gin").write_text("include 't5_1_1_small.gin'\nmodel.d_model = 96\n")
  cfg = _parse([f"--gin_file={tmp_path / 'small.gin'}"])
  assert (cfg.data.objective, cfg.model.d_model) == ("span_corruption", 96)
  (tmp_path / "scoped.gin").write_text("encoder/model.d_model = 40\n")  # gin's scope would bind it there only.
  with pytest.raises(UserError, match=r"scoped.gin, line 1: the scoped binding encoder/model.d_model is not "
                                      r"supported: a run config has one value per field; bind model.d_model"):
    _parse([f"--gin_file={tmp_path / 'scoped.gin'}"])
  (tmp_path / "undefined.gin").write_text("model.d_model = %DIM\n")
  with pytest.raises(UserError, match=r"undefined.gin, line 1: macro %DIM is not defined"):
    _parse([f"--gin_file={tmp_path / 'undefined.gin'}"])
  (tmp_path / "typo.gin").write_text("model.d_modle = 3\n")
  with pytest.raises(UserError, match=r"gin binding model.d_modle \(.*typo.gin, line 1\): unknown config key "
                                      r"'model.d_modle'; did you mean model.d_model\?"):
    _parse([f"--gin_file={tmp_path / 'typo.gin'}"])
  for binding, kind in (("model.dropout = None", "float, e.g. 0.0"), ("train.steps = True", "int, e.g. 300"),
                        ("train.steps = 1e3", "int, e.g. 300"), ("model.scan_layers = 'true'", "bool, e.g. False")):
    (tmp_path / "typed.gin").write_text(binding + "\n")
    with pytest.raises(UserError, match=f"is not a value of this field; give a {kind}"):
      _parse([f"--gin_file={tmp_path / 'typed.gin'}"])
  (tmp_path / "broken.gin").write_text("model.d_model = (3\n")
  with pytest.raises(UserError, match="gin syntax error"):
    _parse([f"--gin_file={tmp_path / 'broken.gin'}"])
  with monkeypatch.context() as m:  # A built-in one's file name, given where there is no such file.
    m.chdir(tmp_path)
    for flag, bare in (("--gin_file", "t5_1_1_small"), ("--config", "lm_125m")):
      suffix = ".gin" if flag == "--gin_file" else ".py"
      with pytest.raises(UserError, match=f"does not exist here; the built-in one is {flag}={bare}"):
        _parse([f"{flag}={bare}{suffix}"])
  (tmp_path / "syntax.py").write_text("def get_config(:\n")
  with pytest.raises(UserError, match="has a syntax error at line 1"):
    _parse([f"--config={tmp_path / 'syntax.py'}"])
