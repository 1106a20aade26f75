"""An objective of the user's own, in a module outside the package (the objectives guide's example, written to a temporary
directory), plugs in by name: its setting is a config field, its examples are what it says, and it trains,
resumes bit-identically, evaluates and inspects as a built-in objective does."""

import json
import os
import re
import shutil

import numpy as np
import pytest
import seqio

from pretrain import objectives
from pretrain.commands import eval as eval_command, inspect_task
from pretrain.data import tasks
from pretrain.system.errors import UserError
from tests.conftest import REPO, tiny_config, train_losses

SHORT = ["--config.data.inputs_length=32", "--config.data.targets_length=32", "--config.train.checkpoint_every=2"]


def guide_objective() -> str:
  """The code block of the objectives guide's 'Your own objective'."""
  with open(os.path.join(REPO, "docs", "guide", "objectives.md")) as f:
    section = f.read().split("## Your own objective", 1)[1]
  return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


@pytest.fixture
def reference(tmp_path):
  (tmp_path / "reverse_span.py").write_text(guide_objective())
  return f"{tmp_path / 'reverse_span.py'}:ReverseSpan"


def test_its_setting_is_a_config_field_and_its_examples_reverse_one_span(reference, corpus_source, vocabulary):
  cfg = tiny_config(f"--config.data.objective={reference}", "--config.data.reversed_tokens=5", *SHORT)
  assert cfg.data.reversed_tokens == 5 and objectives.get(reference).name == "reverse_span"
  with pytest.raises(UserError, match="data.reversed_tokens must be positive, got 0"):
    tiny_config(f"--config.data.objective={reference}", "--config.data.reversed_tokens=0")
  name = tasks.register(corpus_source, vocabulary, objectives.make(reference, cfg.data, seed=0))
  assert name == "corpus_reverse_span"
  dataset = seqio.get_mixture_or_task(name).get_dataset({"inputs": 32, "targets": 32}, split="validation",
                                                        shuffle=False, seed=0)
  for example in list(dataset.as_numpy_iterator())[:20]:
    inputs, targets = example["inputs"], example["targets"]
    assert len(inputs) == len(targets) <= 32 and inputs[-1] == targets[-1] == vocabulary.eos_id
    changed = np.flatnonzero(inputs != targets)
    if len(changed):  # A span of at most 5 tokens, reversed in place.
      start, stop = changed[0], changed[-1] + 1
      assert stop - start <= 5
      np.testing.assert_array_equal(inputs[start:stop], targets[start:stop][::-1])




@pytest.mark.slow
def test_it_trains_resumes_evaluates_and_inspects(reference, tmp_path, run_train, cache_dir, capsys):
  flags = (f"--config.data.objective={reference}", *SHORT)
  whole, halves = tmp_path / "whole", tmp_path / "halves"
  assert (r := run_train(whole, "--config.train.steps=4", *flags)).returncode == 0, r.stderr
  shutil.copytree(whole, halves)  # The run as it stood at its checkpoint of step 2.
  shutil.rmtree(halves / "checkpoints" / "4")
  assert (r := run_train(halves, "--config.train.steps=4", *flags)).returncode == 0, r.stderr
  assert "Resuming from the checkpoint at step 2" in r.stdout
  assert train_losses(halves) == train_losses(whole) and len(train_losses(whole)) == 4
  saved = json.loads((whole / "config.json").read_text())
  assert saved["data"]["objective"] == reference and saved["data"]["reversed_tokens"] == 8
  assert eval_command.evaluate(str(whole), "corpus_reverse_span", "validation", 2)["loss"] > 0
  inspect_task.main(["--task=corpus_reverse_span", "--num=1", *flags, f"--config.data.cache_dir={cache_dir}"])
  assert "--- inputs" in capsys.readouterr().out
  inspect_task.main(["--list", *flags, f"--config.data.cache_dir={cache_dir}"])
  listed = capsys.readouterr().out
  assert re.search(r"corpus_reverse_span +encoder-decoder +data.reversed_tokens=8", listed), listed


def test_a_relative_file_is_kept_absolute_and_a_missing_one_is_not_called_a_damaged_config(tmp_path, monkeypatch):
  """FILE.py:CLASS given relative to the command's directory is kept as an absolute path (config.json: eval,
  generate and a resume elsewhere find it); a run's config naming a file not there from here says so, not that
  the config is damaged."""
  (tmp_path / "reverse_span.py").write_text(guide_objective())
  monkeypatch.chdir(tmp_path)
  import argparse  # pylint: disable=g-import-not-at-top
  from pretrain import cli  # pylint: disable=g-import-not-at-top
  cfg = cli.parse_command_line(argparse.ArgumentParser(), [
      "--config=quickstart", "--config.data.objective=reverse_span.py:ReverseSpan",
      "--config.data.eval_objectives=('reverse_span.py:ReverseSpan',)", *SHORT])[1]
  assert cfg.data.objective == f"{tmp_path / 'reverse_span.py'}:ReverseSpan" == cfg.data.eval_objectives[0]
  # A schedule's member too: data.objective must stay one of them.
  scheduled = cli.parse_command_line(argparse.ArgumentParser(), [
      "--config=quickstart", "--config.data.objective=reverse_span.py:ReverseSpan",
      "--config.data.schedule=((0, (('reverse_span.py:ReverseSpan', 1.0),)),)", *SHORT])[1]
  assert scheduled.data.schedule[0][1][0][0] == cfg.data.objective
  objectives.validate(scheduled)
  from pretrain import config as config_lib, run as run_lib  # pylint: disable=g-import-not-at-top
  from pretrain.workdir import run_files  # pylint: disable=g-import-not-at-top
  # A run that kept the relative form, resumed with the same flags here: no difference to report.
  relative = cfg.copy_and_resolve_references()
  relative.data.objective = "reverse_span.py:ReverseSpan"
  assert run_files.differences(relative, cfg) == []
  cfg.data.objective = "elsewhere.py:ReverseSpan"  # Relative, as runs before kept it.
  (tmp_path / "run").mkdir()
  (tmp_path / "run" / "config.json").write_text(config_lib.to_json(cfg))
  monkeypatch.chdir(tmp_path / "run")
  with pytest.raises(objectives.FileMissing, match=f"the file 'elsewhere.py' does not exist in {tmp_path}/run "
                                                   r"\(a relative path is read from the command's directory\)"):
    run_lib.saved_config(str(tmp_path / "run"))


def test_a_broken_objective_is_named(tmp_path):
  (tmp_path / "broken.py").write_text("from pretrain.objectives import Objective\nclass NoFamily(Objective):\n"
                                      "  name = 'no_family'\nNOT_A_CLASS = 3\n")
  for attribute, message in (("NoFamily", "must set `name` and `family`"),
                             ("NOT_A_CLASS", "has no subclass of pretrain.objectives.Objective named 'NOT_A_CLASS'"),
                             ("Missing", "named 'Missing'")):
    with pytest.raises(UserError, match=re.escape(message)):
      objectives.get(f"{tmp_path / 'broken.py'}:{attribute}")
  with pytest.raises(UserError, match="the file 'missing/objective.py' does not exist"):
    objectives.get("missing/objective.py:Objective")
  with pytest.raises(UserError, match="the module 'no_such_module_here' cannot be imported"):
    objectives.get("no_such_module_here:Objective")


_LAMBDAS = """
import tensorflow as tf
from pretrain.families import CAUSAL_LM
from pretrain.objectives import Objective

class LongDoubled(Objective):
  name, family = "long_doubled", CAUSAL_LM

  def preprocess(self, dataset, sequence_length, output_features):
    return dataset.map(lambda ex: {"targets": ex["targets"] * 2 if tf.size(ex["targets"]) > 2 else ex["targets"]})
"""


def test_a_lambda_of_an_objective_file_is_converted_without_warnings(tmp_path, caplog):
  """AutoGraph reads a lambda's source through the module Python imported it as: the file's module is one it
  finds, so a lambda there is converted (a conditional on a tensor becomes a graph op), not run as written after
  a four-line "could not transform" warning each time it is traced."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  (tmp_path / "lambdas.py").write_text(_LAMBDAS)
  objective = objectives.make(f"{tmp_path / 'lambdas.py'}:LongDoubled", tiny_config().data, seed=0)
  dataset = tf.data.Dataset.from_tensor_slices({"targets": [[1, 2, 3], [4, 5, 6]]}).concatenate(
      tf.data.Dataset.from_tensors({"targets": [7, 8]}))
  got = [list(ex["targets"]) for ex in objective.preprocess(dataset, {}, {}).as_numpy_iterator()]
  assert got == [[2, 4, 6], [8, 10, 12], [7, 8]]
  assert "could not transform" not in caplog.text


def test_a_users_python_control_flow_is_converted_and_the_packages_functions_are_traced_as_written():
  """AutoGraph still rewrites a user's preprocessor (Python `if` on a tensor becomes a graph op), while the
  package's own pipeline functions are traced as written (pretrain.system.tf_loader.trace_as_written)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow.python.autograph.impl import conversion  # pylint: disable=g-import-not-at-top
  from pretrain.data import packing  # pylint: disable=g-import-not-at-top  (applies the rule)
  from pretrain.objectives import common  # pylint: disable=g-import-not-at-top
  import seqio  # pylint: disable=g-import-not-at-top

  def users(x):
    if x > 1:  # A tensor: fails unless converted.
      return x * 10
    return x

  assert list(tf.data.Dataset.range(3).map(users).as_numpy_iterator()) == [0, 1, 20]
  # Also through seqio.map_over_dataset, as a seqio task's preprocessors are written; seqio's converters and
  # vocabularies are traced as written (SEQIO_AS_WRITTEN), its utils (this wrapper among them) converted.
  assert list(seqio.map_over_dataset(users)(tf.data.Dataset.range(3)).as_numpy_iterator()) == [0, 1, 20]
  assert conversion.is_allowlisted(common.finish_example) and conversion.is_allowlisted(packing.trim_and_pack)
  assert all(conversion.is_allowlisted(f) for f in (seqio.preprocessors.rekey, seqio.SentencePieceVocabulary.encode_tf))
  assert not conversion.is_allowlisted(users) and not conversion.is_allowlisted(seqio.utils.map_over_dataset)
