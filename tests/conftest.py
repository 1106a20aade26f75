"""Shared fixtures: the bundled corpus and its vocabulary, built once per session."""

import argparse
import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest.mock

import ml_collections
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from pretrain.parallel import tpu  # pylint: disable=g-import-not-at-top

tpu.without_tpus()  # As the command line does, before JAX starts (libtpu's lockfile, its errors).
# One XLA compilation cache for the whole session: its two workers and every process they start (they inherit the
# environment) compile the same tiny steps again and again, and compiling is about a third of a tiny run's time.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="pretrain-tests-xla-")
  atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
  os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"  # Every program, however quick to compile.
  os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "-1"
# One data cache for the session too (the cache_dir fixture): the workers share the prepared corpus, its
# vocabularies and token stores, each built once by whichever process comes first (system/data_cache.build_once).
if "PRETRAIN_TESTS_DATA_CACHE" not in os.environ:
  os.environ["PRETRAIN_TESTS_DATA_CACHE"] = tempfile.mkdtemp(prefix="pretrain-tests-data-")
  atexit.register(shutil.rmtree, os.environ["PRETRAIN_TESTS_DATA_CACHE"], ignore_errors=True)

# Tests compile hundreds of tiny programs and run each a few steps: LLVM's optimisations of the compiled code cost
# more time than they save there (a fifth of test_encoder_decoder's and test_decoding's time, a third of an
# 8-device layout's). XLA's older (non-MLIR) fusion emitters compile a third faster again (4 layouts of
# tests/parallel/test_mesh_layouts.py: 23.7 s against 15.9 s; a clean `make test` took 29 minutes against 37), and
# code generated in one piece rather than split over threads that the busy cores cannot run at once a tenth
# faster again (12.8 s against 11.5 s). Numerics are XLA's all the same, up to the order of the sums
# (tests/numerics.py); what runs fast is measured by the benchmarks in tools/.
# PRETRAIN_TEST_XLA_FLAGS replaces them: the suite run with another order of summation (tests/numerics.py).
XLA_TEST_FLAGS = os.environ.get("PRETRAIN_TEST_XLA_FLAGS", "--xla_backend_optimization_level=0 "
                                "--xla_cpu_use_fusion_emitters=false --xla_cpu_parallel_codegen_split_count=1")
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {XLA_TEST_FLAGS}".strip()


# A slow test says so one way: `@pytest.mark.slow` on the test. A test that asks for these fixtures (shared, or a
# module's own: they train or start `pretrain` processes) or is `extended` and does not say so fails collection.
SLOW_FIXTURES = {"run_train", "trained_run", "end_to_end_runs", "eight_device_runs", "outcomes"}


# `extended` (make test-all only): every command the README and docs show, run in order (test_doc_commands.py),
# and the whole pages of four experiments at a tiny size (ptb, compare_objectives, cooldown_check, data_quality):
# 1,542 of the 10,177 test-seconds of a clean `make test` of 68cbc44 (15%), on 2 cores where CI allows 40 minutes. What
# they assemble is checked in parts by `make test`: the experiment skeleton by the other pages' tests
# (scaling, compare_tokenizers, compare_moe, curriculum, mup_transfer, sweep), each page's own pieces by its
# file's other tests (rate choice, row split, verdicts, the 5-gram's published figure, whole-split evaluation).
def pytest_configure(config):
  config.addinivalue_line("markers", "slow: trains a model, starts a process or compiles for seconds (make test-fast leaves these out)")
  config.addinivalue_line("markers", "extended: runs end to end again what other tests check in parts, for many "
                                     "minutes (make test leaves these out, make test-all runs them)")


# The files that take longest (per-test durations of `make test` in a clean clone, `--durations=0`), run first:
# xdist's workers take whole files in collection order (with --no-loadscope-reorder: Makefile), so a long file
# started last would run alone at the end.
# A stale list only changes the order.
LONGEST_FIRST = ("test_multiprocess.py", "test_mesh_layouts.py", "test_train.py", "test_ul2_prefix_lm.py",
                 "test_hf_export.py", "test_probe.py", "test_bad_inputs.py", "test_indexed_data.py",
                 "test_pipeline.py", "test_schedule.py", "test_moe.py", "test_harness.py", "test_zero_shot.py",
                 "test_cli.py", "test_mup.py", "test_scaling.py", "test_bench.py", "test_tokenizer_kinds.py",
                 "test_encoder_decoder.py", "test_launch.py", "test_long_documents.py", "test_sweep.py",
                 "test_evaluate.py", "test_compile.py", "test_cooldown.py", "test_compare_tokenizers.py",
                 "test_install.py", "test_curriculum.py", "test_decoding.py", "test_decoder_only.py")


def pytest_sessionfinish(session):
  """Under `make coverage`, this process's lines are saved as its tests end: execnet ends a pytest-xdist worker that
  is slow to finish (10 s) with os._exit, which skips coverage's own save at exit, and the lines of every file that
  worker ran were lost (about a third of the suite's, a different third in each run)."""
  del session
  try:
    import coverage  # pylint: disable=g-import-not-at-top  (the test extra; measured only under `make coverage`)
  except ImportError:
    return
  measuring = coverage.Coverage.current()
  if measuring is not None:
    measuring.save()


def pytest_collection_modifyitems(items):
  unmarked = sorted({item.nodeid.split("[")[0] for item in items if not item.get_closest_marker("slow") and (
      SLOW_FIXTURES & set(getattr(item, "fixturenames", ())) or item.get_closest_marker("extended"))})
  if unmarked:
    raise pytest.UsageError("these tests train, start processes or are extended, so mark each @pytest.mark.slow: "
                            + ", ".join(unmarked))
  rank = lambda item: (LONGEST_FIRST.index(item.path.name) if item.path.name in LONGEST_FIRST
                       else len(LONGEST_FIRST))
  items.sort(key=rank)  # Stable: each file's tests keep their order.


def fake_devices(count: int) -> dict:
  """The environment of a process with `count` fake CPU devices (and the tests' XLA flags)."""
  return {**os.environ, "JAX_PLATFORMS": "cpu",
          "XLA_FLAGS": f"--xla_force_host_platform_device_count={count} {XLA_TEST_FLAGS}"}


from pretrain.system import host_memory  # pylint: disable=g-import-not-at-top

host_memory.keep_freed_memory()  # As the command line does: the tests' steps run faster.

import jax  # pylint: disable=g-import-not-at-top
from pretrain import cli, objectives, run as run_lib  # pylint: disable=g-import-not-at-top
from pretrain.data import sources  # pylint: disable=g-import-not-at-top
from pretrain.vocab import pipeline as vocab
from tests import one_process  # pylint: disable=g-import-not-at-top

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A model and batch small enough for a CPU test, used with the quickstart config. No samples at the end of a run
# (decoding compiles and runs there): the runs that check them ask for one (--config.sample.num=1).
TINY = [
    "--config.model.d_model=32", "--config.model.num_layers=1", "--config.model.num_heads=2",
    "--config.model.num_kv_heads=2", "--config.model.head_dim=16", "--config.model.mlp_dim=64",
    "--config.data.seq_len=32", "--config.train.batch_size=4", "--config.train.eval_batches=2",
    "--config.train.log_every=1", "--config.sample.num=0", "--config.sample.max_new_tokens=4",
]


def tiny_config(*args: str):
  """The quickstart config with the TINY model, then `--config.KEY=VALUE` args."""
  return cli.parse_command_line(argparse.ArgumentParser(),
                                         ["--config=configs/quickstart.py", *TINY, *args])[1]


def train_losses(workdir, with_eval: bool = False) -> dict[int, float]:
  """{step: train/loss} of a run's metrics.jsonl (with `with_eval`, eval/loss at steps that log no train loss)."""
  from pretrain.train import metrics  # pylint: disable=g-import-not-at-top
  keys = ("train/loss", "eval/loss") if with_eval else ("train/loss",)
  return {r["step"]: next(r[k] for k in keys if k in r) for r in metrics.read(str(workdir)) if any(k in r for k in keys)}


def task_examples(source, vocabulary, objective_name: str, lengths: dict[str, int], split: str = "validation",
                  num: int | None = None, seed: int = 0, **overrides) -> list[dict]:
  """The first `num` examples (all: None) of an objective's seqio task over a source, before packing; `overrides`
  set the quickstart's data fields (e.g. mlm_rate=0.3)."""
  import itertools  # pylint: disable=g-import-not-at-top
  import seqio  # pylint: disable=g-import-not-at-top
  from pretrain import configs  # pylint: disable=g-import-not-at-top
  from pretrain.data import tasks  # pylint: disable=g-import-not-at-top
  data_cfg = configs.load("quickstart").data
  data_cfg.update(overrides)
  name = tasks.register(source, vocabulary, objectives.make(objective_name, data_cfg, seed=seed))
  dataset = seqio.get_mixture_or_task(name).get_dataset(lengths, split=split, shuffle=False, seed=seed)
  return list(itertools.islice(dataset.as_numpy_iterator(), num))


def tiny_run(*args: str, vocab_size: int = 128) -> run_lib.Run:
  """The model side of a run (pretrain.run) of tiny_config(*args), without data."""
  return run_lib.Run.build(tiny_config(*args), vocab_size)


@pytest.fixture(scope="session")
def cache_dir():
  return os.environ["PRETRAIN_TESTS_DATA_CACHE"]


@pytest.fixture(scope="session")
def corpus_source(cache_dir):
  return sources.make_source(ml_collections.ConfigDict({"source": "corpus", "cache_dir": cache_dir}))


@pytest.fixture(scope="session")
def vocabulary(corpus_source, cache_dir):
  """The quickstart's vocabulary (4096 ids), so CLI runs in tests find it cached."""
  path = vocab.cached_model(corpus_source.texts("train", max_chars=20_000_000), 4096, "unigram", cache_dir,
                            objectives.pieces())
  return vocab.load(path)


@pytest.fixture(scope="session")
def run_pretrain(cache_dir, tmp_path_factory):
  """Runs `pretrain ARGV` with the test cache in this process (pretrain.cli.main, from the repository), reported
  as subprocess.run(..., capture_output=True, text=True) reports a process: a Python, TensorFlow and JAX start-up
  less (a third of a tiny run). Tests of what only a process shows (signals, exit, runs side by side) start one."""
  scratch = tmp_path_factory.mktemp("pretrain_output")

  def run(*argv: str):
    with unittest.mock.patch.dict(os.environ, {"PRETRAIN_CACHE": cache_dir}), contextlib.chdir(REPO):
      return one_process.in_this_process(list(argv), scratch)

  return run


@pytest.fixture(scope="session")
def run_train(run_pretrain, cache_dir, vocabulary):
  """Runs `pretrain train` with the quickstart config, a tiny model and the test cache: in this process
  (run_pretrain), or, given Popen's keywords, in a process of its own (python -m pretrain) to signal or to run
  beside another."""
  del vocabulary  # Built first, so runs reuse it.

  def run(workdir, *args, **popen):
    argv = ["train", "--config=configs/quickstart.py", f"--workdir={workdir}", *TINY, *args]
    if popen:
      return subprocess.Popen([sys.executable, "-m", "pretrain", *argv], cwd=REPO,
                              env={**os.environ, "PRETRAIN_CACHE": cache_dir}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, **popen)
    return run_pretrain(*argv)

  return run


def wait_for_checkpoint(process, workdir, step: int, timeout: float = 300) -> None:
  """Returns once the run `process` (a `pretrain train` in `workdir`) has its checkpoint of `step`."""
  deadline = time.time() + timeout
  while not (workdir / "checkpoints" / str(step)).exists():
    assert process.poll() is None and time.time() < deadline, f"no checkpoint {step}: the run ended or took {timeout} s"
    time.sleep(0.01)


def kill_after_checkpoint(run_train, workdir, *args, step: int) -> None:
  """Starts `pretrain train` (run_train) in `workdir` and SIGKILLs it once its checkpoint of `step` exists."""
  process = run_train(workdir, *args, start_new_session=True)
  wait_for_checkpoint(process, workdir, step)
  process.send_signal(signal.SIGKILL)
  process.communicate(timeout=120)


def straight_and_resumed(run_train, tmp_path, args, step: int):
  """The workdirs (straight, killed) of a run trained without a stop and of the same run killed after its
  checkpoint of `step` and rerun (which resumes from there)."""
  straight, killed = tmp_path / "straight", tmp_path / "killed"
  result = run_train(straight, *args)
  assert result.returncode == 0, result.stderr
  kill_after_checkpoint(run_train, killed, *args, step=step)
  resumed = run_train(killed, *args)
  assert resumed.returncode == 0, resumed.stderr
  assert f"Resuming from the checkpoint at step {step}" in resumed.stdout + resumed.stderr
  return straight, killed


@pytest.fixture(scope="session")
def trained_run(run_train, tmp_path_factory):
  """The workdir of a TINY causal-LM run of 3 steps, evaluated on 3 batches, shared by the tests that read a
  trained run (one that changes it works on a copy)."""
  workdir = tmp_path_factory.mktemp("trained") / "run"
  result = run_train(workdir, "--config.train.steps=3", "--config.train.eval_batches=3")
  assert result.returncode == 0, result.stderr
  return workdir


@pytest.fixture(scope="module", autouse=True)
def _free_compiled_programs():
  """JAX keeps every program a process compiled, and each worker runs dozens of files: late in a clean `make test`
  its three workers held 4.4, 5.8 and 6.5 GB beside their subprocesses, near the machine's 24 GB. Freed after each
  file, four model files in one process peak at 3.4 GB instead of 5.4 (410 s instead of 432); a later file that
  needs a program again loads it from the session's compilation cache on disk."""
  yield
  jax.clear_caches()
