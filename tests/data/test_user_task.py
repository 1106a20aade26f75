"""data.task: a seqio Task registered by the user's own module, with a preprocessor of its own, is trained on
through the replay pipeline (its examples cannot be index-addressed), and says so."""

import numpy as np
import pytest

from pretrain import run as run_lib
from pretrain.commands import eval as eval_command, inspect_task, prepare_data
from pretrain.data.replay import ReplayBatches
from pretrain.system.errors import UserError
from pretrain.train import checkpoint, evaluation
from tests.conftest import tiny_config

_MODULE = '''
import functools

import seqio
import tensorflow as tf

VOCABULARY = seqio.SentencePieceVocabulary({model!r}, extra_ids=100)
TEXTS = {{"train": [f"Document {{i}} Of The Training Split, Written In Title Case." for i in range(64)],
         "validation": [f"Held Out Document {{i}}." for i in range(64)]}}


def lowercase(dataset):  # The user's own preprocessor: nothing the project knows of.
  return dataset.map(lambda ex: {{"text": tf.strings.lower(ex["text"])}})


seqio.TaskRegistry.remove("lowercase_lm")
seqio.TaskRegistry.add(
    "lowercase_lm",
    source=seqio.FunctionDataSource(
        lambda split, shuffle_files, seed=None: tf.data.Dataset.from_tensor_slices({{"text": TEXTS[split]}}),
        splits=("train", "validation")),
    preprocessors=[lowercase, functools.partial(seqio.preprocessors.rekey, key_map={{"targets": "text"}}),
                   seqio.preprocessors.tokenize],
    output_features={{"targets": seqio.Feature(VOCABULARY, add_eos=True)}})
'''


@pytest.fixture
def user_module(tmp_path, vocabulary):
  path = tmp_path / "my_tasks.py"
  path.write_text(_MODULE.format(model=vocabulary.sentencepiece_model_file))
  return str(path)


def test_a_user_task_trains_through_replay_and_says_so(user_module, cache_dir, capsys):
  cfg = tiny_config("--config.data.task=lowercase_lm", f"--config.data.task_module={user_module}",
                    f"--config.data.cache_dir={cache_dir}")
  run = run_lib.Run.build_with_data(cfg)
  assert run.task == "lowercase_lm" and run.source is None
  batches = run.train_batches()
  assert isinstance(batches, ReplayBatches)
  assert "data.task=lowercase_lm is read with data.pipeline=replay" in capsys.readouterr().out
  first, second = next(batches), next(batches)
  text = run.vocabulary.decode(first["decoder_target_tokens"][0].tolist())
  assert "document" in text and text == text.lower()  # The module's preprocessor ran.
  position = batches.position()
  assert position["task"] == "lowercase_lm" and position["examples"] == 8
  resumed = run.train_batches({**position, "examples": 4})
  np.testing.assert_array_equal(next(resumed)["decoder_target_tokens"], second["decoder_target_tokens"])
  held_out = evaluation.global_batches(run, run.task, run.objective, "validation", 1)
  assert held_out[0]["decoder_target_tokens"].shape == (4, 32)
  with pytest.raises(UserError, match="no token store to prepare"):
    prepare_data.prepare(cfg)


def test_a_user_task_that_does_not_fit_is_refused(user_module, cache_dir):
  def build(*args):
    return run_lib.Run.build_with_data(tiny_config(f"--config.data.cache_dir={cache_dir}", *args))
  with pytest.raises(UserError, match="is not a registered seqio Task or Mixture"):
    build("--config.data.task=lowercase_lm_typo", f"--config.data.task_module={user_module}")
  with pytest.raises(UserError, match="does not exist"):
    build("--config.data.task=lowercase_lm", "--config.data.task_module=missing/tasks.py")
  with pytest.raises(UserError, match=r"cannot be imported"):
    build("--config.data.task=lowercase_lm", "--config.data.task_module=no_such_module_here")
  with pytest.raises(UserError, match=r"reads \['inputs', 'targets'\]; choose the objective"):
    build("--config.data.task=lowercase_lm", f"--config.data.task_module={user_module}",
          "--config.data.objective=span_corruption")
  with pytest.raises(UserError, match="data.context='stream' changes nothing: data.task=lowercase_lm brings its own"):
    build("--config.data.task=lowercase_lm", f"--config.data.task_module={user_module}",
          "--config.data.context=stream")
  with pytest.raises(UserError, match="set --config.tokenizer.extra_ids=100"):
    build("--config.data.task=lowercase_lm", f"--config.data.task_module={user_module}",
          "--config.tokenizer.extra_ids=10")


@pytest.mark.slow
def test_train_evaluate_and_inspect_a_user_task(tmp_path, user_module, run_train, cache_dir, capsys):
  flags = ("--config.data.task=lowercase_lm", f"--config.data.task_module={user_module}")
  workdir = tmp_path / "run"
  result = run_train(workdir, "--config.train.steps=2", *flags)
  assert result.returncode == 0, result.stderr
  assert "data.task=lowercase_lm is read with data.pipeline=replay" in result.stdout
  assert checkpoint.Checkpointer(str(workdir / "checkpoints"), keep=2).restore_data(2)["examples"] == 8
  assert eval_command.evaluate(str(workdir), "lowercase_lm", "validation", 1)["loss"] > 0
  inspect_task.main(["--task=lowercase_lm", "--num=1", *flags, f"--config.data.cache_dir={cache_dir}"])
  assert "--- targets" in capsys.readouterr().out
