import ast
import inspect
import json
import os
import subprocess
import sys

import pytest

from pretrain import config, configs, objectives, vocab
from pretrain.system.errors import UserError
from tests.conftest import REPO


@pytest.fixture
def cfg():
  return config.load_config_file("configs/quickstart.py")


def test_overrides_parse_to_the_field_type(cfg):
  rest = config.apply_overrides(cfg, ["--config.train.steps=7", "--config.optimizer.learning_rate", "1e-4",
                                      "--config.model.tie_embeddings=true", "--config.data.source=files",
                                      "--other"])
  assert rest == ["--other"]
  assert cfg.train.steps == 7 and isinstance(cfg.train.steps, int)
  assert cfg.optimizer.learning_rate == 1e-4
  assert cfg.model.tie_embeddings is True
  assert cfg.data.source == "files"


def test_a_tuple_field_takes_one_value_or_bare_names(cfg):
  """As a user writes them: the README's train.harness_tasks=pretrain_cloze, names separated by commas, one number."""
  config.apply_overrides(cfg, ["--config.train.harness_tasks=pretrain_cloze", "--config.data.eval_objectives=clm, fim",
                               "--config.train.keep_steps=120", "--config.train.profile_steps=(5, 7)"])
  assert cfg.train.harness_tasks == ("pretrain_cloze",) and cfg.data.eval_objectives == ("clm", "fim")
  assert cfg.train.keep_steps == (120,) and cfg.train.profile_steps == (5, 7)
  with pytest.raises(UserError, match=r"'clm fim' is not a valid tuple"):
    config.apply_overrides(cfg, ["--config.data.eval_objectives=clm fim"])


def test_unknown_key_names_the_nearest(cfg):
  with pytest.raises(UserError, match=r"unknown config key 'train.step'; did you mean --config.train.steps\?"):
    config.apply_overrides(cfg, ["--config.train.step=5"])


def test_bad_value_names_the_type(cfg):
  with pytest.raises(UserError, match="not a valid int"):
    config.apply_overrides(cfg, ["--config.train.steps=many"])


def test_validate_rejects_nonsense(cfg):
  cfg.train.batch_size = 0
  with pytest.raises(UserError, match="train.batch_size must be positive"):
    config.validate(cfg)


def test_missing_config_file():
  with pytest.raises(UserError, match="does not exist"):
    config.load_config_file("configs/nope.py")


def test_config_imports_no_front_end():
  """pretrain.config is the base the gin front-end builds on; importing it must not import gin_config."""
  code = "import json, sys, pretrain.config; print(json.dumps(sorted(sys.modules)))"
  loaded = set(json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                         text=True).stdout))
  assert "pretrain.config" in loaded
  assert not loaded & {"pretrain.config.gin", "pretrain.cli", "gin"}
  imported = set()  # Nor inside a function, where the import above would not see it.
  for node in ast.walk(ast.parse(inspect.getsource(config))):
    if isinstance(node, ast.ImportFrom):
      imported |= {f"{node.module}.{a.name}" for a in node.names}
    elif isinstance(node, ast.Import):
      imported |= {a.name for a in node.names}
  assert not {n for n in imported if "gin" in n or n.startswith("pretrain.cli")}, imported


def test_update_sets_dotted_keys_and_names_the_nearest(cfg):
  assert config.update(cfg, {"model.d_model": 96, "train.steps": 7}, "test") is cfg
  assert (cfg.model.d_model, cfg.train.steps) == (96, 7)
  with pytest.raises(UserError, match=r"model.d_modle \(test\): unknown config key 'model.d_modle'; "
                                      r"did you mean model.d_model\?"):
    config.update(cfg, {"model.d_modle": 3}, "test")
  with pytest.raises(UserError, match=r"train.steps \(test\): "):
    config.update(cfg, {"train.steps": "many"}, "test")


@pytest.mark.parametrize("key", [k for k, v in config.RANGES.items() if v is config.POSITIVE])
@pytest.mark.parametrize("value", ["0", "-2"])
def test_fields_that_must_be_positive_are_named(key, value):
  from tests.conftest import tiny_config  # pylint: disable=g-import-not-at-top
  with pytest.raises(UserError, match=f"{key} must be positive, got {value}"):
    tiny_config(f"--config.{key}={value}")


def test_a_config_file_that_raises_is_one_line(tmp_path, capsys):
  bad = tmp_path / "bad.py"
  bad.write_text("def get_config():\n  return {}['model']\n")
  with pytest.raises(UserError, match=r"config file '.*bad.py' raised KeyError: 'model' \(--verbose shows where\)"):
    config.load_config_file(str(bad))
  assert "Traceback" not in capsys.readouterr().err
  with pytest.raises(UserError, match="raised KeyError"):
    config.load_config_file(str(bad), verbose=True)
  shown = capsys.readouterr().err
  assert "Traceback" in shown and "in get_config" in shown
  broken = tmp_path / "broken.py"
  broken.write_text("import no_such_module_here\n")
  with pytest.raises(UserError, match="raised ModuleNotFoundError: No module named 'no_such_module_here'"):
    config.load_config_file(str(broken))


def test_a_config_file_s_mistyped_field_is_refused_and_a_missing_one_is_its_default(tmp_path):
  """A config file that sets train.step (for train.steps) trained at the default step count, unsaid; one that
  leaves a field out ended in a KeyError's traceback."""
  import argparse  # pylint: disable=g-import-not-at-top
  from pretrain import cli  # pylint: disable=g-import-not-at-top
  mistyped = tmp_path / "mistyped.py"
  mistyped.write_text("from pretrain.config import schema\ndef get_config():\n  cfg = schema.defaults()\n"
                      "  cfg.train.step = 1000\n  return cfg\n")
  with pytest.raises(UserError, match=r"the config sets train.step, which no part of the project reads; did you "
                                      r"mean train.steps\?"):
    cli.parse_command_line(argparse.ArgumentParser(), [f"--config={mistyped}"])
  partial = tmp_path / "partial.py"
  partial.write_text("import ml_collections\ndef get_config():\n"
                     "  return ml_collections.ConfigDict({'train': {'steps': 7}, 'data': {'noise_density': 0.3}})\n")
  _, cfg = cli.parse_command_line(argparse.ArgumentParser(), [f"--config={partial}",
                                                                  "--config.data.objective=span_corruption"])
  assert cfg.train.steps == 7 and cfg.data.noise_density == 0.3  # An objective's setting is a field too.
  assert cfg.model.d_model == config.schema.defaults().model.d_model


def test_a_run_saved_before_a_field_existed_reads_as_its_default_and_resumes(cfg, tmp_path):
  """A config.json (or a config file) from before model.attention existed holds 'auto', and a resume may
  change the attention implementation (it computes the step, it shapes no parameter) but not the width."""
  from pretrain import run as run_lib, workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  old = cfg.to_dict()
  del old["model"]["attention"]
  (tmp_path / "config.json").write_text(json.dumps(old))
  (tmp_path / "checkpoints").mkdir()
  assert run_lib.saved_config(str(tmp_path)).model.attention == "auto"
  old_file = tmp_path / "old_config.py"
  old_file.write_text("import ml_collections\ndef get_config():\n"
                      f"  return ml_collections.ConfigDict({old!r})\n")
  assert config.load_config_file(str(old_file)).model.attention == "auto"
  config.validate(config.load_config_file(str(old_file)))
  cfg.model.attention = "splash"
  workdir_lib.check_same_model(cfg, str(tmp_path))
  cfg.model.d_model = 48
  with pytest.raises(UserError, match="model.d_model=256, not 48"):
    workdir_lib.check_same_model(cfg, str(tmp_path))


def test_a_run_s_config_json_is_a_config_to_resume_or_start_from(tmp_path):
  """--config=WORKDIR/config.json: every value the run trained with (as T5X's config.gin), so a run whose command
  line is lost resumes with `--workdir=WORKDIR --config=WORKDIR/config.json`; flags still go over it."""
  import argparse  # pylint: disable=g-import-not-at-top
  from pretrain import cli  # pylint: disable=g-import-not-at-top
  from tests.conftest import tiny_config  # pylint: disable=g-import-not-at-top
  trained = tiny_config("--config.data.objective=span_corruption", "--config.train.steps=7")
  (tmp_path / "config.json").write_text(config.to_json(trained))
  _, read = cli.parse_command_line(argparse.ArgumentParser(), [f"--config={tmp_path}/config.json"])
  assert config.to_json(read) == config.to_json(trained)
  _, read = cli.parse_command_line(argparse.ArgumentParser(), [f"--config={tmp_path}/config.json",
                                                               "--config.train.steps=9"])
  assert read.train.steps == 9 and read.data.objective == "span_corruption"


def test_the_schema_declares_each_field_once_and_the_rest_follows(capsys):
  """The quickstart is the schema's defaults; the checks and older configs' values come from it; docs/config.md
  is `pretrain config --fields --markdown`."""
  from pretrain.commands import config as config_command  # pylint: disable=g-import-not-at-top
  from pretrain.config import schema  # pylint: disable=g-import-not-at-top
  assert configs.load("quickstart").to_dict() == objectives.with_settings(schema.defaults()).to_dict()
  assert config.RANGES == schema.ranges() and config.NEWER_FIELDS == schema.newer_fields()
  assert config.RANGES["tokenizer.kind"].what == " | ".join(vocab.KINDS)  # The registry's kinds, not a copy.
  with open(os.path.join(REPO, "docs", "config.md")) as f:
    assert f.read() == config_command.markdown(), "regenerate: pretrain config --fields --markdown > docs/config.md"
  config_command.main(["--config.model.d_model=64"])
  assert json.loads(capsys.readouterr().out)["model"]["d_model"] == 64


# A rule between fields, a command line that breaks it, and what the error says: each refused as the config is
# read (pretrain config here; launch and sweep in their own tests), not when the model is built or trained.
RULES = [
    (["--config.model.parameterization=mup", "--config.optimizer.name=adafactor"], "mup is defined for optimizer.name"),
    (["--config.model.parameterization=mup", "--config.model.tie_embeddings=True"], "mup needs untied embeddings"),
    (["--config.model.parameterization=mup", "--config.data.objective=electra"], "mup needs untied embeddings"),
    (["--config.data.objective=mlm", "--config.train.harness_tasks=('pretrain_cloze',)"],
     "train.harness_tasks runs lm-eval's tasks, which score text with a language model; an encoder-only run"),
    (["--config.model.num_heads=3"], r"model.num_heads \(3\) must be a multiple of model.num_kv_heads"),
    (["--config.model.head_dim=63"], "model.head_dim must be even"),
    (["--config.train.microbatches=3"], "does not split into train.microbatches=3"),
    (["--config.model.feed_forward=relu"], "model.feed_forward='relu' is for the encoder-decoder"),
    (["--config.data.objective=contrastive", "--config.model.dropout=0.1", "--config.model.moe_experts=4"],
     "the encoder-only contrastive objective's loss does not take the experts'"),
    (["--config.model.moe_experts=4", "--config.model.moe_top_k=5"], "model.moe_top_k=5 is more than the 4 experts"),
    (["--config.model.moe_experts=4", "--config.model.moe_every=5"], "model.moe_every=5 is more than"),
    (["--config.model.moe_experts=4", "--config.model.moe_every=3", "--config.model.scan_layers=True"],
     "is not a multiple"),
    (["--config.model.moe_experts=4", "--config.mesh.expert=3"], "does not split over mesh.expert=3"),
    (["--config.data.objective=electra", "--config.model.electra_generator_size=2.0"], "electra_generator_size=2.0"),
    (["--config.data.objective=contrastive"], "set model.dropout above 0"),
    (["--config.data.eval_objectives=('span_corruption',)"], "data.eval_objectives names 'span_corruption'"),
    # A causal LM's rows of 128 read as a prefix LM's 128 + 128: the loss at positions it never trained at.
    (["--config.data.eval_objectives=('prefix_lm_decoder',)"],
     r"data.eval_objectives names 'prefix_lm_decoder', whose rows of 256 tokens \(data.inputs_length \+ "
     r"data.targets_length\) are longer than the 128 positions the run's model trains at"),
    (["--config.data.pipeline=replay", "--config.data.length_schedule=((0, 64), (10, 128))"],
     "data.length_schedule packs rows of each length from the token store"),
    (["--config.data.length_schedule=((0, 48), (10, 128))"], "must divide the row of 128"),
    (["--config.data.objective=span_corruption", "--config.data.inputs_length=128", "--config.data.targets_length=32",
      "--config.data.length_schedule=((0, 10), (100, 160))"],
     r"data.length_schedule's rows of 10 tokens \(from step 0; every length of the row shrunk by 16\): "
     "targets_length=2 is too short"),
    (["--config.tokenizer.vocab_size=200"], "tokenizer.vocab_size=200 is too small"),
    (["--config.optimizer.schedule=wsd", "--config.optimizer.decay_steps=290"], "exceed train.steps=300"),
    (["--config.optimizer.learning_rate=inf"], "optimizer.learning_rate must be a finite number, got inf"),
    (["--config.sample.temperature=nan"], "sample.temperature must be a finite number, got nan"),
    (["--markdown"], "--markdown writes the fields' table; give it with --fields"),
]


@pytest.mark.parametrize("argv, message", RULES, ids=[" ".join(argv) for argv, _ in RULES])
def test_pretrain_config_refuses_each_rule_between_fields(argv, message):
  from pretrain.commands import config as config_command  # pylint: disable=g-import-not-at-top
  with pytest.raises(UserError, match=message):
    config_command.main.__wrapped__(argv)
