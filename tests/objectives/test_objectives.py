"""The objectives' registry: what each built-in objective declares, and how a config gets their settings."""

import pytest

from pretrain import config, configs, families as family, objectives
from pretrain.objectives import Objective, Setting
from pretrain.system.errors import UserError


@pytest.mark.parametrize("name", objectives.NAMES)
def test_each_objective_declares_itself(name):
  spec = objectives.get(name)
  assert spec.name == name and isinstance(spec.family, family.Family)
  assert spec.preprocess is not Objective.preprocess
  assert spec.row_split in ("half", "longest_inputs")
  for key, setting in spec.settings.items():
    section, field = key.split(".")
    assert section in ("data", "model", "loss") and setting.help, key
    assert setting.valid is None or setting.valid.test(setting.default), key


def test_the_vocabulary_pieces_keep_their_order():
  """The order is part of the vocabulary's cache key and its ids: a new objective's pieces go last."""
  assert objectives.pieces()[:7] == ("[NLU]", "[NLG]", "[S2S]", "<PRE>", "<SUF>", "<MID>", "[MASK]")


def test_a_config_gets_the_settings_it_lacks_at_their_defaults():
  cfg = config.load_config_file(configs.path("quickstart"))
  assert "noise_density" not in cfg.data  # The quickstart declares no objective's setting.
  cfg.data.mlm_rate = 0.3
  objectives.with_settings(cfg)
  assert cfg.data.noise_density == 0.15 and cfg.model.electra_generator_size == 0.25 and cfg.data.mlm_rate == 0.3
  assert cfg.data.ul2_denoisers[0] == ("R", 3, 0.15, 1.0)


def test_two_objectives_may_not_give_one_setting_two_defaults():
  class Rate(Objective):
    name, settings = "rate", {"data.mlm_rate": Setting(0.4, help="")}
  with pytest.raises(UserError, match="declares data.mlm_rate with the default 0.4, but another objective"):
    objectives.settings([objectives.get("mlm"), Rate])


def test_an_unknown_name_names_the_nearest():
  with pytest.raises(UserError, match=r"unknown objective 'ul2_decodr'; did you mean 'ul2_decoder'\?"):
    objectives.get("ul2_decodr")


def test_checks_run_with_the_config_before_any_data():
  cfg = configs.load("quickstart")
  cfg.data.objective, cfg.data.targets_length = "span_corruption", 10
  with pytest.raises(UserError, match="targets_length=10 is too short for span corruption"):
    objectives.validate(cfg)
  cfg.data.objective, cfg.data.ul2_denoisers = "ul2", (("Q", 3, 0.15, 1.0),)
  with pytest.raises(UserError, match=r"data.ul2_denoisers row \('Q', 3, 0.15, 1.0\) is invalid"):
    objectives.validate(cfg)
  cfg.data.task = "a_seqio_task_of_the_users"  # Its preprocessors are its own: the objective's settings are unread.
  with pytest.raises(UserError, match=r"data.ul2_denoisers=.* changes nothing: data.task=a_seqio_task_of_the_users"):
    objectives.validate(cfg)
  cfg.data.ul2_denoisers = objectives.settings(objectives.known(cfg))["data.ul2_denoisers"].default
  objectives.validate(cfg)  # Nor are the objective's own checks made (targets_length=10).


def test_a_user_objective_s_settings_go_in_data_model_or_loss(tmp_path):
  (tmp_path / "elsewhere.py").write_text(
      "from pretrain import families\nfrom pretrain.objectives import Objective, Setting\n"
      "class Elsewhere(Objective):\n"
      "  name, family, settings = 'elsewhere', families.CAUSAL_LM, {'optimizer.thing': Setting(1, help='')}\n"
      "  def preprocess(self, dataset, sequence_length, output_features):\n    return dataset\n")
  with pytest.raises(UserError, match="declares the setting 'optimizer.thing'; name settings data.NAME"):
    objectives.get(f"{tmp_path / 'elsewhere.py'}:Elsewhere")
