import pytest

from pretrain import config
from pretrain.errors import UserError


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
