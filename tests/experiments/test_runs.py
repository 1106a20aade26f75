"""pretrain/experiments/runs.py: what every experiment shares, its saved runs' keys, and its seeds and budgets
refused in one line."""

import json

import pytest

from pretrain import configs
from pretrain.experiments import arms
from pretrain.experiments import cooldown_check
from pretrain.experiments import runs
from pretrain.experiments import scaling
from pretrain.system.errors import UserError


@pytest.mark.slow
def test_saved_figures_stay_filed_under_their_config_when_a_field_is_added():
  """A result saved before optimizer.muon_dtype existed (the field absent) is the same run's for AdamW, whose
  step does not read it, and another run's for Muon, whose saved run iterated in float32 (the field's older value)
  where today's default is bfloat16. Any other difference is another run."""
  for name, same in (("adamw", True), ("muon", False)):
    cfg = configs.load("quickstart")
    cfg.optimizer.name = name
    today = json.loads(cfg.to_json_best_effort())
    saved = json.loads(cfg.to_json_best_effort())
    del saved["optimizer"]["muon_dtype"]
    assert (runs.config_key(saved) == runs.config_key(today)) == same, name
    saved["train"]["steps"] += 1
    assert runs.config_key(saved) != runs.config_key(today)


@pytest.mark.slow
def test_every_arm_is_checked_before_the_first_run_trains(tmp_path):
  good, bad = configs.load("quickstart"), configs.load("quickstart")
  bad.model.num_kv_heads = 3
  with pytest.raises(UserError, match=r"model.num_heads \(4\) must be a multiple of model.num_kv_heads \(3\)"):
    arms.each({"good": good, "bad": bad}, [0], str(tmp_path))
  assert not list(tmp_path.iterdir())  # The good arm, first, did not train.


@pytest.mark.slow
def test_a_workdir_holding_a_run_of_another_config_is_refused_not_deleted(tmp_path):
  """A run whose figures alone are kept (result.json, as git keeps docs/ptb_runs) or a stopped one (config.json)
  of another config would be deleted to train this one there: refused, naming the field, before any arm trains."""
  cfg = configs.load("quickstart")
  cfg.train.seed = 0
  other, older = json.loads(cfg.to_json_best_effort()), json.loads(cfg.to_json_best_effort())
  other["train"]["steps"] += 1
  older["train"]["gone"] = 1  # A field this version lacks.
  kept, stopped = tmp_path / "b" / "seed0", tmp_path / "c" / "seed0"
  for workdir, name, saved in ((kept, arms.RESULT, {"key": {**other, "window": [128, 64]}, "result": {}}),
                               (stopped, "config.json", older)):
    workdir.mkdir(parents=True)
    (workdir / name).write_text(json.dumps(saved))
  steps = cfg.train.steps
  with pytest.raises(UserError, match=rf"b/seed0 holds a run of another config \(train.steps {steps + 1} there, "
                                      rf"{steps} here\); rerun with its settings to read it back, give another "):
    arms.each({"a": cfg, "b": cfg}, [0], str(tmp_path))
  with pytest.raises(UserError, match=r"c/seed0 holds a run of another config \(train.gone 1 there, None here\)"):
    arms.figures(cfg, str(stopped))
  assert not (tmp_path / "a").exists()  # The first arm did not train.
  assert [p.name for p in kept.iterdir()] == [arms.RESULT] and [p.name for p in stopped.iterdir()] == ["config.json"]


@pytest.mark.slow
def test_budgets_and_fractions_that_name_one_run_twice_or_none_are_refused():
  with pytest.raises(UserError, match="give one or more distinct seeds from 0"):  # Before seed 0 trains.
    runs.seeds("0,-1")
  for text in ("inf", "1e12,inf", "nan"):
    with pytest.raises(UserError, match="give distinct positive FLOP counts"):
      scaling.parse_budgets(text)
  assert [a["name"] for a in cooldown_check.arms(1000, [0.1, 0.104], ["1-sqrt"])] == ["wsd_10_1-sqrt", "wsd_10.4_1-sqrt"]
  with pytest.raises(UserError, match="--fractions 0.1 and 0.104 both decay over 1 of the 10 steps"):
    cooldown_check.arms(10, [0.1, 0.104], ["1-sqrt"])


def test_a_page_says_where_its_command_ran(tmp_path, monkeypatch):
  """A page's command reads its relative paths from where it ran: the repository root, or the directory named
  (every page said the root)."""
  from pretrain.experiments import runs  # pylint: disable=g-import-not-at-top
  from tests.conftest import REPO  # pylint: disable=g-import-not-at-top
  monkeypatch.chdir(REPO)
  assert runs.where_run() == "from the repository root"
  monkeypatch.chdir(tmp_path)
  assert runs.where_run() == f"in {tmp_path}"
