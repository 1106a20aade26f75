"""The `pretrain` console script: every subcommand answers --help, explains each flag, and names missing ones."""

import argparse
import importlib
import os
import re
import signal
import subprocess
import sys

import pytest

from pretrain import cli
from tests.conftest import REPO, TINY

SCRIPT = os.path.join(os.path.dirname(sys.executable), "pretrain")  # Installed by `pip install -e .`.


def run(*args):
  return subprocess.run([SCRIPT, *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_overview_lists_every_subcommand():
  result = run("--help")
  assert result.returncode == 0, result.stderr
  names = {"train", "cooldown", "eval", "lm-eval", "probe", "plot", "goodput", "generate", "export", "inspect-task",
           "inspect-data", "prepare-data", "train-tokenizer", "config", "estimate-memory", "compile", "sweep", "experiment",
           "bench", "launch"}
  for name in names:
    assert f"\n  {name} " in result.stdout
  assert set(cli.SUBCOMMANDS) == names


def test_every_experiment_runs_through_pretrain_experiment():
  """`pretrain experiment NAME` for each of pretrain/experiments/'s, listed by --help, and no tools/ wrapper left."""
  from pretrain.commands import experiment  # pylint: disable=g-import-not-at-top
  shown = run("experiment", "--help")
  assert shown.returncode == 0 and all(f"\n  {name} " in shown.stdout for name in experiment.EXPERIMENTS)
  unknown = run("experiment", "cooldown")
  assert unknown.returncode == 2
  assert "unknown experiment 'cooldown'; did you mean 'cooldown_check'?" in unknown.stderr.strip().splitlines()[-1]
  assert not [name for name in os.listdir(os.path.join(REPO, "tools"))
              if name.removesuffix(".py") in experiment.EXPERIMENTS]


def test_an_experiment_starts_as_quietly_as_pretrain():
  """`pretrain experiment NAME` refuses its bad flags in one line, and the TensorFlow its runs import later prints
  none of its native start-up lines (without that, the CUDA-driver notices and cuInit's error of a CPU machine)."""
  script = ("import sys\n"
            "from pretrain import cli\n"
            "try:\n  sys.exit(cli.main(['experiment', 'cooldown_check', '--fractions=0.1,0.104', '--steps=10']))\n"
            "except SystemExit as e:\n  print('exit', e.code)\n"
            "from pretrain.system import tf_loader\n"
            "tf_loader.tensorflow()\n"
            "print('imported')\n")
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=env)
  assert result.stdout.split() == ["exit", "2", "imported"], result.stderr
  assert result.stderr.strip().splitlines()[-1:] == [
      "error: --fractions 0.1 and 0.104 both decay over 1 of the 10 steps (one run twice); give fractions at least "
      "1/10 apart, or more --steps"], result.stderr
  assert [line for line in result.stderr.splitlines() if NOISE.search(line)] == [], result.stderr


def test_unknown_subcommand_suggests_the_closest():
  result = run("evaluate")
  assert result.returncode == 2
  assert "unknown subcommand 'evaluate'; did you mean 'eval'?" in result.stderr


@pytest.mark.parametrize("name", list(cli.SUBCOMMANDS))
def test_help_explains_every_flag(name, monkeypatch, capsys):
  """Records every flag the subcommand's parser defines, in process, and asks each for a help text."""
  flags = []
  original = argparse._ActionsContainer.add_argument  # pylint: disable=protected-access

  def recording(self, *args, **kwargs):
    action = original(self, *args, **kwargs)
    flags.append(action)
    return action

  monkeypatch.setattr(argparse._ActionsContainer, "add_argument", recording)  # pylint: disable=protected-access
  module = importlib.import_module(cli.SUBCOMMANDS[name][0])
  with pytest.raises(SystemExit) as exit_info:
    module.main(["--help"], prog=f"pretrain {name}")
  assert exit_info.value.code == 0
  shown = capsys.readouterr().out
  assert shown.startswith(f"usage: pretrain {name}")
  options = [a for a in flags if a.option_strings and a.dest != "help"]
  assert options
  undocumented = [a.option_strings[0] for a in options if not a.help]
  assert not undocumented, f"pretrain {name}: flags without help: {undocumented}"


def test_help_through_the_console_script_and_python_m():
  assert "--prompt" in run("generate", "--help").stdout
  by_module = subprocess.run([sys.executable, "-m", "pretrain", "export", "--help"], cwd=REPO, capture_output=True,
                             text=True)
  assert by_module.returncode == 0 and "--out" in by_module.stdout


def test_output_to_a_reader_that_went_away_ends_quietly():
  """`pretrain --help | head -1`: a pipe whose reader has gone (here closed before the command writes) ends the
  command as a shell expects (128 + SIGPIPE), with no traceback."""
  reader, writer = os.pipe()
  os.close(reader)
  shown = subprocess.run([SCRIPT, "--help"], cwd=REPO, stdout=writer, stderr=subprocess.PIPE, text=True, timeout=120)
  os.close(writer)
  assert shown.returncode == 128 + signal.SIGPIPE and shown.stderr == "", shown.stderr


@pytest.mark.parametrize("args, missing", [
    (["train"], "--workdir"),
    (["eval", "--workdir=runs/x"], "--task"),
    (["generate", "--prompt=hi"], "--workdir"),
    (["export", "--workdir=runs/x"], "--out"),
    (["plot"], "--workdir"),
    (["train-tokenizer"], "--out"),
])
def test_missing_required_flag_is_one_clear_error(args, missing, tmp_path):
  (tmp_path / "config.json").write_text("{}")  # A workdir as --workdir's type checks it.
  result = run(*[a.replace("runs/x", str(tmp_path)) for a in args])
  assert result.returncode == 2
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith(f"error: pretrain {args[0]}: the following arguments are required: {missing}"), result.stderr


@pytest.mark.parametrize("name, argv, message", [
    ("generate", ["--workdir=runs/none", "--prompt="], "--prompt is empty"),
    ("generate", ["--workdir=runs/none", "--prompt=a", "--temperature=-1"],
     r"argument --temperature: give at least 0 \(0: greedy\), not -1.0"),
    ("generate", ["--workdir=runs/none", "--prompt=a", "--top_p=0"],
     r"argument --top_p: give a mass in \(0, 1\].*, not 0.0"),
    ("generate", ["--workdir=runs/none", "--prompt=a", "--top_p=1.5"], r"argument --top_p: give a mass in \(0, 1\]"),
    # Every number a flag takes is finite (nan compares false with any bound, inf passes a lower one).
    ("generate", ["--workdir=runs/none", "--prompt=a", "--temperature=nan"],
     "argument --temperature: 'nan' is not a finite number"),
    ("generate", ["--workdir=runs/none", "--prompt=a", "--top_p=inf"],
     "argument --top_p: 'inf' is not a finite number"),
    ("generate", ["--workdir=runs/none", "--prompt=a", "--top_k=nan"], "argument --top_k: 'nan' is not an integer"),
    ("train", ["--workdir=/nonexistent/run", "--heartbeat_timeout_seconds=0"],
     "argument --heartbeat_timeout_seconds: give at least 1, not 0"),
    ("train", ["--workdir=/nonexistent/run", "--num_processes=-2"],
     "argument --num_processes: give at least 1, not -2"),
    ("generate", ["--workdir=runs/none", "--prompt=a", "--top_k=-3"], "argument --top_k: give at least 0, not -3"),
    ("generate", ["--workdir=runs/none", "--prompt=a", "--max_new_tokens=0"], "argument --max_new_tokens: give at least 1, not 0"),
    ("inspect-task", ["--task=corpus_clm", "--num=-1"], "argument --num: give at least 1, not -1"),
    ("plot", ["--workdir=runs/none", f"--out={REPO}/setup.py/curves.png"], "cannot be written: .*setup.py is a file"),
    ("export", ["--workdir=runs/none", "--out="], "argument --out: give a directory"),
    ("estimate-memory", ["--devices=0"], "argument --devices: give at least 1, not 0"),
    ("eval", ["--workdir=runs/none", "--task=corpus_clm", "--split=tests"], "argument --split: invalid choice: 'tests'"),
])
def test_bad_flags_are_named_before_anything_loads(name, argv, message, tmp_path):
  from pretrain.system.errors import UserError  # pylint: disable=g-import-not-at-top
  (tmp_path / "config.json").write_text("{}")  # A workdir as the flag's type checks it; nothing reads it.
  module = importlib.import_module(cli.SUBCOMMANDS[name][0])
  with pytest.raises(UserError, match=message):
    module.main.__wrapped__([a.replace("runs/none", str(tmp_path)) for a in argv], prog=f"pretrain {name}")


@pytest.mark.slow
def test_the_error_is_the_only_line(tmp_path):
  """TensorFlow's and XLA's start-up lines are silenced unless asked for (TF_CPP_MIN_LOG_LEVEL set, --verbose)."""
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  result = subprocess.run([sys.executable, "-m", "pretrain", "train", f"--workdir={tmp_path}",
                           "--config.tokenizer.path=/nonexistent/spm.model"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == ["error: vocabulary file '/nonexistent/spm.model' does not exist; give "
                                                "an existing .model or tokenizer .json file in tokenizer.path, or "
                                                "leave it empty to train one"]


# What the libraries print on a CPU that looks like failure (issue: a quiet first hour).
NOISE = re.compile(r"cuInit|CUDA|oneDNN|[Tt]ype inference|normalizer\.cc|precompiled_charsmap|absl|"
                   r"^[IWE]\d{4} |Variant folder|Waiting for previous save|AutoGraph|WARNING:tensorflow")


@pytest.mark.slow
def test_a_run_prints_its_own_lines_only(tmp_path, cache_dir, vocabulary):
  """A UL2 run on new files (a token store built, so SentencePiece's TF kernel loads), evaluated and saved: no
  library's log line, unless --verbose asks for them."""
  (tmp_path / "notes.txt").write_text("\n\n".join(f"Note {i}: the quick brown fox jumps over the lazy dog. " * 4
                                                  for i in range(300)))
  argv = [sys.executable, "-m", "pretrain", "train", f"--workdir={tmp_path}/run", *TINY, "--config.train.steps=2",
          "--config.data.objective=ul2", "--config.data.source=files", f"--config.data.train_files={tmp_path}/*.txt",
          f"--config.tokenizer.path={vocabulary.sentencepiece_model_file}", "--config.train.eval_every=1"]
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  env["PRETRAIN_CACHE"] = cache_dir
  result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
  assert result.returncode == 0, result.stderr[-3000:]
  lines = re.split(r"[\r\n]", result.stdout + result.stderr)
  assert [line for line in lines if NOISE.search(line)] == []
  assert "Trained 2 steps." in result.stdout + result.stderr
  verbose = subprocess.run([*argv, "--config.train.steps=3", "--verbose"], cwd=REPO, capture_output=True, text=True,
                           timeout=600, env=env)
  assert verbose.returncode == 0 and NOISE.search(verbose.stdout + verbose.stderr), verbose.stderr[-3000:]


@pytest.mark.slow
def test_inspect_task_with_an_objective_that_imports_tensorflow_prints_its_own_lines_only(tmp_path, cache_dir,
                                                                                        vocabulary):
  """A user's objective module imports TensorFlow first thing and maps a lambda; inspect-task imports seqio
  itself: neither lets TensorFlow's native start-up lines through (every import of the data stack goes through
  tf_loader), nor AutoGraph's warnings."""
  del vocabulary
  from tests.objectives.test_user_objective import guide_objective  # pylint: disable=g-import-not-at-top
  code = guide_objective().replace(".map(reverse)", ".map(lambda example: reverse(example))")
  assert "lambda" in code
  (tmp_path / "reverse_span.py").write_text("import tensorflow as tf\n" + code)
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  env["PRETRAIN_CACHE"] = cache_dir
  result = subprocess.run([sys.executable, "-m", "pretrain", "inspect-task", "--task=corpus_reverse_span", "--num=1",
                           f"--config.data.objective={tmp_path / 'reverse_span.py'}:ReverseSpan",
                           "--config.data.inputs_length=32", "--config.data.targets_length=32"],
                          cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "--- inputs" in result.stdout
  assert [line for line in re.split(r"[\r\n]", result.stdout + result.stderr) if NOISE.search(line)] == []



def test_estimate_memory_s_vocab_size_stands_in_for_the_model_s(capsys):
  """--vocab_size changes the embedding's bytes also where the config sets model.vocab_size (every C4 zoo run)."""
  from pretrain.commands import estimate_memory  # pylint: disable=g-import-not-at-top
  params = {}
  for flags in ((), ("--vocab_size=1000",)):
    estimate_memory.main(["--no_compile", "--config.model.vocab_size=4096", "--config.model.d_model=32",
                          "--config.model.num_layers=1", *flags])
    line = next(l for l in capsys.readouterr().out.splitlines() if l.split()[:1] == ["params"])
    params[flags] = int(line.split("(")[1].split()[0].replace(",", ""))
  assert params[("--vocab_size=1000",)] < params[()]


@pytest.mark.slow
def test_estimate_memory_s_devices_are_cpu_devices_on_any_machine():
  """--devices fakes CPU devices: $JAX_PLATFORMS, set after the config's parsing had imported JAX, was read too
  late, and a machine with a GPU or TPU sized the mesh for its own devices."""
  code = ("import jax\nfrom pretrain.commands import estimate_memory\n"
          "estimate_memory.main(['--devices=2', '--no_compile', '--config.model.d_model=32', "
          "'--config.model.num_layers=1'])\nprint('platforms', jax.config.jax_platforms, jax.device_count())\n")
  env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")}
  shown = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=300)
  assert shown.returncode == 0, shown.stderr[-3000:]
  assert shown.stdout.splitlines()[-1] == "platforms cpu 2", shown.stdout[-2000:]
