"""After a `pip install` of the repository (a wheel, not the editable checkout), the console script runs from any
directory: the default config and the zoo ship inside the package, and --config takes a built-in config's name.
And `make coverage` measures what the tests run, in the processes they start too."""

import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO, TINY


@pytest.mark.slow
def test_the_installed_command_runs_outside_the_checkout(tmp_path, cache_dir, vocabulary):
  del vocabulary  # Built first, so the run finds it cached.
  site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
  subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                  f"--target={site}", REPO], check=True, capture_output=True, timeout=300)
  elsewhere.mkdir()
  env = {**os.environ, "PYTHONPATH": str(site), "PRETRAIN_CACHE": cache_dir}

  def pretrain(*args):
    return subprocess.run([str(site / "bin" / "pretrain"), *args], cwd=elsewhere, env=env, capture_output=True,
                          text=True, timeout=600)

  where = subprocess.run([sys.executable, "-c", "import pretrain.configs as c; print(c.DIRECTORY)"], cwd=elsewhere,
                         env=env, capture_output=True, text=True, check=True).stdout.strip()
  assert where == str(site / "pretrain" / "configs"), where  # The installed copy, not the checkout's.
  trained = pretrain("train", "--workdir=w", "--config.train.steps=3", *TINY)
  assert trained.returncode == 0, trained.stderr
  assert (elsewhere / "w" / "checkpoints" / "3").is_dir()
  zoo = pretrain("estimate-memory", "--config=lm_125m", "--devices=8", "--no_compile")
  assert zoo.returncode == 0, zoo.stderr
  assert "decoder-only" in zoo.stdout and "8 x" in zoo.stdout, zoo.stdout
  gin = pretrain("estimate-memory", "--gin_file=t5_1_1_small", "--devices=8", "--no_compile")
  assert gin.returncode == 0 and "encoder-decoder" in gin.stdout, gin.stderr
  typo = pretrain("train", "--workdir=w2", "--config=lm_125", "--config.train.steps=3")
  assert typo.returncode == 2 and typo.stderr.startswith("error: --config='lm_125' is not a built-in config; did "
                                                         "you mean 'lm_125m'?"), typo.stderr


@pytest.mark.slow
def test_make_coverage_runs_make_tests_tests_and_measures_the_processes_they_start(tmp_path):
  with open(os.path.join(REPO, "Makefile")) as f:
    recipes = dict(re.findall(r"^([a-z-]+):.*\n((?:\t.*\n)+)", f.read().replace("\\\n", ""), flags=re.M))
  tests_flags = recipes["test"].split("-m pytest", 1)[1].split()
  assert f"-m pytest {' '.join(tests_flags)}" in " ".join(recipes["coverage"].split()), recipes["coverage"]
  # A line that only a child process runs: this script imports nothing of the package itself.
  script = tmp_path / "starts_pretrain.py"
  script.write_text("import subprocess, sys\n"
                    "subprocess.run([sys.executable, '-m', 'pretrain', '--help'], check=True, capture_output=True)\n")
  env = {**os.environ, "COVERAGE_FILE": str(tmp_path / ".coverage"),
         "COVERAGE_RCFILE": os.path.join(REPO, ".coveragerc")}
  for command in (["run", str(script)], ["combine", "-q"], ["json", "-q", "-o", str(tmp_path / "coverage.json")]):
    subprocess.run([sys.executable, "-m", "coverage", *command], cwd=REPO, env=env, check=True, timeout=120)
  measured = json.loads((tmp_path / "coverage.json").read_text())["files"]
  cli = next(v for name, v in measured.items() if name.endswith(os.path.join("pretrain", "cli.py")))
  with open(os.path.join(REPO, "pretrain", "cli.py")) as f:
    usage_line = next(i for i, line in enumerate(f, 1) if "print(usage())" in line)
  assert usage_line in cli["executed_lines"]
  # A test process ended by os._exit, as execnet ends a pytest-xdist worker slow to finish, keeps its lines.
  (tmp_path / "exit_at_end.py").write_text("import os\n\ndef pytest_unconfigure(config):\n  os._exit(0)\n")
  for data in tmp_path.glob(".coverage*"):
    data.unlink()
  ended = {**env, "PYTHONPATH": str(tmp_path)}
  test = "tests/config/test_config.py::test_unknown_key_names_the_nearest"
  for command in (["run", "-m", "pytest", "-q", "-p", "exit_at_end", "-p", "no:cacheprovider", test],
                  ["combine", "-q"], ["json", "-q", "-o", str(tmp_path / "coverage.json")]):
    subprocess.run([sys.executable, "-m", "coverage", *command], cwd=REPO, env=ended, check=True, timeout=300)
  measured = json.loads((tmp_path / "coverage.json").read_text())["files"]
  assert any(name.endswith(os.path.join("pretrain", "config", "keys.py")) and v["executed_lines"]
             for name, v in measured.items())
