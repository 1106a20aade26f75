"""Every command README.md and docs/ show (tests/test_docs.py collects them), run: as written where that takes
seconds, otherwise with flags added that shrink it (SHRINK: TINY's model, a few steps, a small limit), so that a
command that cannot find its tasks or refuses its own flags fails here. What a test machine cannot run (an
accelerator, a cluster, the network, a prepared TFDS dataset, hours) is in NOT_RUN with the reason, its flags
still parsed; a command in neither fails the test, so a new page's command gets a row.

Each page's commands run in order, in this process, in a directory of the page's own (configs/ and tools/
linked, data/*.jsonl, the files the page writes out, and runs/quickstart: a copy of the shared tiny run), so that
a command reads what the page's earlier commands wrote.
"""

import json
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys

import pytest

from pretrain import cli
from tests import test_docs
from tests.conftest import REPO, TINY, fake_devices

STEPS = ("--config.train.steps=2", "--config.train.eval_batches=1")
# Flags added to a command, by its subcommand or tool: later flags win (argparse keeps the last, config overrides
# apply in order).
SHRINK = {
    "pretrain train": (*TINY, *STEPS),
    "pretrain sweep": (*TINY, *STEPS, "--probe_seeds=1"),
    "pretrain bench": (*TINY, "--steps=1", "--warmup=0"),
    "pretrain lm-eval": ("--limit=2",),
    # Each measure takes its own (probe refuses a flag its measure does not read).
    "pretrain probe --task=zero_shot": ("--limit=20",),
    "pretrain probe --task=same_document": ("--seeds=1", "--documents=60"),
    "pretrain probe --task=packages": (),
    "pretrain probe --task=packages --finetune": ("--seeds=1", "--finetune_steps=2"),
    "pretrain train-tokenizer": ("--config.tokenizer.vocab_size=512",),  # data/*.jsonl holds too little for 32000
    "pretrain generate": ("--max_new_tokens=8",),  # The shared tiny run was trained on 32 positions.
    "pretrain.downstream.harness": ("--limit", "2"),
    "tools/bench_data.py": ("--objectives=clm", "--seconds=0.2", "--rounds=1", "--batch_size=4"),
    "tools/bench_resume.py": ("--positions=0,1e3", "--replay_up_to=1e3"),
    "tools/bench_lm_eval.py": ("--tasks=pretrain_cloze", "--limit=1", "--repeats=2", "--batch_size=1"),
    "tools/coord_check.py": ("--widths=32,64", "--steps=1"),
    "tools/zoo_compile.py": ("--configs=ul2_small",),  # The smallest slice (4 chips); all 15 take 45 minutes.
}
# A zoo config keeps its objective, optimizer and schedule under configs/gin/tiny.gin (docs/guide/configs.md).
ZOO_SHRINK = ("--gin_file=tiny",)
# Training commands shrunk otherwise than their subcommand's row, by their workdir.
SHRINK_INSTEAD = {
    # Its cooldowns branch from its checkpoints of steps 120 and 180: the quickstart's 300 steps, of TINY's model.
    "runs/wsd": TINY,
    # A schedule's objectives make rows of one length: TINY's 32 positions, as 16 inputs and 16 targets.
    # The Penn Treebank's words: TINY's model (configs/gin/tiny.gin would read the bundled corpus instead).
    "runs/ptb_small": (*TINY, *STEPS),
    "runs/ul2r": (*TINY, *STEPS, "--config.data.inputs_length=16", "--config.data.targets_length=16"),
}

# Commands that need what a test machine lacks, and the tests that run their kind.
TFDS_C4 = "a prepared TFDS C4 (hundreds of GB in /data/tfds); tests/data/test_sources.py reads a TFDS dataset"
EXPERIMENT = "an experiment of hours; its flags parse here (--help) and tests/experiments/test_NAME.py runs it tiny"
PTB_EXPERIMENT = "an experiment of an hour; its flags parse here (--help) and tests/data/test_ptb.py runs it on a few " \
                 "hundred lines"
STAGES = ("compiles a 7B model's step for 64 chips, pipelined or over two slices (1-5 minutes); "
          "tests/parallel/test_compile.py compiles small ones for TPU slices")
LONG_ROW = ("compiles a 1B model's step over rows of 131,072 tokens for 8 chips (minutes; the first is refused as "
            "too large, as the page says); tests/parallel/test_compile.py compiles small ones for TPU slices")
NOT_RUN = {
    "pretrain train --workdir=runs/c4 --config.data.source=tfds --config.data.tfds_name=c4/en:3.1.0 "
    "--config.data.tfds_data_dir=/data/tfds": TFDS_C4,
    "pretrain train --workdir=runs/t5 --gin_file=configs/gin/t5_1_1_small.gin --gin.data.tfds_data_dir=/data/tfds":
        TFDS_C4,
    "pretrain train --workdir=runs/two --coordinator_address=127.0.0.1:12345 --num_processes=2 --process_id=0 "
    "--config.train.batch_size=8": "one of two processes joined on a fixed port, which concurrent test sessions "
                                   "would share; tests/parallel/test_multiprocess.py trains such a pair",
    "tools/bench_gpu.sh OUT_DIR": "a GPU machine (the device tool's)",
    "pretrain compile --topology=v5p-128 --config=lm_7b": "compiles a 7B model's step for 64 chips (minutes); "
                                                          "tests/parallel/test_compile.py compiles small ones for TPU slices",
    "pretrain compile --topology=v5p-16 --config=lm_1b --config.data.seq_len=131072 --config.train.batch_size=16 "
    "--config.mesh.fsdp=8 --config.train.microbatches=2": LONG_ROW,
    "pretrain compile --topology=v5p-16 --config=lm_1b --config.data.seq_len=131072 --config.train.batch_size=16 "
    "--config.mesh.fsdp=2 --config.mesh.context=4 --config.train.microbatches=8": LONG_ROW,
    "pretrain compile --topology=v5p-128 --config=lm_7b --config.mesh.stage=4 --config.mesh.fsdp=4": STAGES,
    "pretrain compile --topology=v5p-128 --config=lm_7b --config.mesh.stage=4 --config.mesh.fsdp=4 "
    "--config.train.microbatches=32": STAGES,
    "pretrain compile --topology=v5p-128 --config=lm_7b --config.mesh.stage=2 --config.mesh.fsdp=8": STAGES,
    "pretrain compile --topology=v5p-128 --config=lm_7b --config.mesh.stage=2 --config.mesh.fsdp=8 "
    "--config.mesh.stage_repeats=2": STAGES,
    "pretrain train --workdir=runs/pipeline --config.mesh.data=2 --config.mesh.stage=4 --config.model.scan_layers=True "
    "--config.train.microbatches=4": "four stages, which the page's shrunk model (one layer) cannot have; "
                                     "tests/models/test_pipeline.py trains this layout and kills it",
    **{"pretrain compile --topology=v5p-128 --config=lm_7b --config.model.num_layers=64 --config.model.mlp_dim=16384 "
       "--config.model.num_heads=16 --config.model.num_kv_heads=16 --config.model.head_dim=256" + mesh:
       "compiles a 17B model's step for 64 chips, pipelined or not (1-7 minutes); tests/parallel/test_compile.py compiles "
       "small ones for TPU slices"
       for mesh in ("", " --config.mesh.stage=2 --config.mesh.fsdp=8", " --config.mesh.stage=4 --config.mesh.fsdp=4")},
    "pretrain compile --topology=v5p-64 --slices=2 --config=lm_7b --config.mesh.stage=2 --config.mesh.dcn_stage=2 "
    "--config.mesh.fsdp=8": STAGES,
    "pretrain compile --topology=v5p-64 --slices=2 --config=lm_7b --config.mesh.data=2 --config.mesh.dcn_data=2 "
    "--config.mesh.fsdp=8": STAGES,
    "pretrain compile --topology=v5p-64 --slices=2 --config=lm_7b --config.mesh.fsdp=16 --config.mesh.dcn_fsdp=2":
        STAGES,
    "pretrain compile --topology=h100-64 --config=lm_7b": "JAX's CUDA plugin (the gpu-compile extra), which the "
                                                          "suite does not install; tests/parallel/test_compile.py runs it "
                                                          "where it is",
    "python tools/bench_startup.py": "starts each command five times in processes of its own (minutes)",
    "python tools/zero_shot_tasks.py --leak --split_by=document --out=/tmp/v1/pretrain/downstream/zero_shot_v1":
        "reads version 1's files, which the line before it extracts from the repository's history into /tmp/v1",
    "pretrain experiment ptb": PTB_EXPERIMENT,
    "pretrain experiment compare_objectives": EXPERIMENT,
    "pretrain experiment compare_objectives --objectives=clm,mlm,span_corruption --seeds=0,1,2 --lr_grid= "
    "--finetune_seeds=3 --out=docs/compare_objectives_finetuned --out_dir=runs/compare_objectives_finetuned":
        EXPERIMENT,
    "pretrain experiment curriculum": EXPERIMENT,
    "pretrain experiment scaling": EXPERIMENT,
    "pretrain experiment cooldown_check": EXPERIMENT,
    "pretrain experiment data_quality": EXPERIMENT,
    "pretrain experiment compare_tokenizers": EXPERIMENT,
    "pretrain experiment compare_moe": "an experiment of hours; its flags parse here (--help), and "
                                       "tests/experiments/test_compare_moe.py checks its models and refusals (no tiny "
                                       "run)",
    "pretrain experiment exercises": "an experiment of hours; its flags parse here (--help), and its sweeps, on "
                                 "docs/exercises.md, run here shrunk",
    "pretrain experiment mup_transfer": "an experiment of hours; its flags parse here (--help), and its sweeps, on "
                                    "docs/mup_transfer.md, run here shrunk",
}
# Commands that take minutes even shrunk, on two cores: their flags parse (tests/test_docs.py), and the test named
# runs their kind.
MINUTES = {
    r"--probe=zero_shot": "every zero-shot item scored per point: tests/experiments/test_sweep.py probes a sweep, tests/downstream/test_probe.py "
                           "scores the zero-shot tasks",
    r"^pretrain bench --compare=hf": "imports torch and times two models in it; tests/bench/test_bench.py compares them",
    r"^python tools/coord_check.py": "compiles and trains each width of its ladder; tests/models/test_mup.py runs it tiny",
    r"--config.mesh.data=2 --config.mesh.fsdp=2 --config.mesh.tensor=2": "a process of 8 fake devices; "
                                                                          "tests/parallel/test_multiprocess.py trains this mesh",
}
# Reports' commands that read what their tool wrote first (data files, a cached vocabulary, a parent run's
# checkpoints) or the runs a tool made, as its page lists them: what the tool ran (tests/experiments/test_NAME.py runs
# each tool tiny).
TOOL_WRITTEN = re.compile(r"runs/data_quality/data/|--workdir=runs/(cooldown|scaling)/")


def _key(words: list[str]) -> str:
  """The row of SHRINK a command takes: `pretrain SUBCOMMAND` (a probe: with its measure), a tool's path, or a
  module run with -m."""
  if words[:2] == ["pretrain", "probe"]:
    task = next((w.split("=", 1)[1] for w in words if w.startswith("--task=")), "zero_shot")
    return f"pretrain probe --task={task}" + (" --finetune" if "--finetune" in words else "")
  if words[0] == "pretrain":
    return f"pretrain {words[1]}"
  return words[2] if words[1] == "-m" else words[1]


def _workdir(words: list[str]) -> str | None:
  return next((w.split("=", 1)[1] for w in words if w.startswith("--workdir=")), None)


def _is_zoo(words: list[str]) -> bool:
  return any(w.startswith("--gin_file=") or (w.startswith("--config=") and "quickstart" not in w) for w in words)


def _shrunk(words: list[str]) -> list[str]:
  """The command as it runs here: as written, plus its row's flags (a sweep's grid cut to a few points)."""
  if words[:2] == ["pretrain", "train"] and _workdir(words) in SHRINK_INSTEAD:
    return [*words, *SHRINK_INSTEAD[_workdir(words)]]
  if words[:2] == ["pretrain", "sweep"]:
    # One point: each axis keeps its first value (tests/experiments/test_sweep.py trains grids of several).
    words = [w if not w.startswith("--grid.") else w.split(",")[0] for w in words]
  extra = SHRINK.get(_key(words), ())
  if words[:2] in (["pretrain", "train"], ["pretrain", "sweep"]) and _is_zoo(words):
    extra = (*ZOO_SHRINK, *extra)
  return [*words, *extra]


def _commands() -> list[tuple[str, list[str]]]:
  """(page, words) of every distinct command of our programs the pages show, in the pages' order."""
  seen, found = set(), []
  for page in test_docs.PAGES:
    for words in test_docs.page_commands(page):
      text = shlex.join(words)
      if (words[0] in ("pretrain", "python") or words[0].startswith("tools/")) and text not in seen:
        seen.add(text)
        found.append((page, words))
  return found


COMMANDS = _commands()


def _needs_devices(words: list[str]) -> int:
  """The fake CPU devices a command needs in a process of its own (its mesh, or --devices), else 0."""
  devices = [int(w.split("=")[1]) for w in words if w.startswith("--devices=")]
  mesh = [int(w.split("=")[1]) for w in words if re.match(r"^--config\.mesh\.(data|fsdp|tensor|expert|context)=\d+$", w)]
  product = 1
  for size in mesh:
    product *= size
  return devices[0] if devices else (product if product > 1 else 0)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, trained_run, vocabulary, corpus_source):
  """workspace(page): the directory a page's commands run in, made once per page."""
  from tests.data.test_user_task import _MODULE  # pylint: disable=g-import-not-at-top
  made = {}
  documents = [json.dumps({"text": t}) for t, _ in zip(corpus_source.texts("train"), range(400))]

  def make(page: str):
    if page not in made:
      root = tmp_path_factory.mktemp(re.sub(r"\W", "_", page))
      for name in ("configs", "tools"):
        os.symlink(os.path.join(REPO, name), root / name)
      (root / "data").mkdir()
      (root / "data" / "docs.jsonl").write_text("\n".join(documents) + "\n")
      (root / "docs").mkdir()  # Where the tools write their reports and plots.
      (root / "my_tasks.py").write_text(_MODULE.format(model=vocabulary.sentencepiece_model_file)
                                        .replace("lowercase_lm", "my_task"))
      for name, text in test_docs.page_files(page).items():
        (root / name).write_text(text)
      shutil.copytree(trained_run, root / "runs" / "quickstart")
      made[page] = root
    return made[page]

  return make


def _run_here(words: list[str]) -> int:
  """A command in this process, as its console script or `python` runs it; its exit status."""
  try:
    if words[0] == "pretrain":
      return cli.main(words[1:]) or 0
    if words[1] == "-m":
      sys.argv = [words[2], *words[3:]]
      runpy.run_module(words[2], run_name="__main__", alter_sys=True)
    else:
      sys.argv = words[1:]
      runpy.run_path(words[1], run_name="__main__")
  except SystemExit as e:
    return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
  return 0


def _run_apart(words: list[str], devices: int) -> subprocess.CompletedProcess:
  """A command that needs fake devices, in a process of its own."""
  program = [sys.executable, "-m", "pretrain"] if words[0] == "pretrain" else [sys.executable]
  return subprocess.run([*program, *words[1:]], env={**fake_devices(devices), **{
      k: os.environ[k] for k in ("PRETRAIN_CACHE",) if k in os.environ}}, capture_output=True, text=True,
                        timeout=600, cwd=os.getcwd())


# Each command's flags and config parse in `make test` (tests/test_docs.py), and what it does is tested where its
# feature is; running every page's commands in order takes half an hour of a 2-core machine.
@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.parametrize("page, words", COMMANDS, ids=[shlex.join(w) for _, w in COMMANDS])
def test_the_documented_command_runs(page, words, workspace, cache_dir, monkeypatch, capfd):
  text = shlex.join(words)
  minutes = next((reason for pattern, reason in MINUTES.items() if re.search(pattern, text)), None)
  if text in NOT_RUN or TOOL_WRITTEN.search(text) or minutes:
    pytest.skip(NOT_RUN.get(text, minutes or "reads files its tool wrote first"))  # test_not_run_commands_parse checks these
  monkeypatch.chdir(workspace(page))
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  monkeypatch.setattr(sys, "argv", list(sys.argv))
  command = _shrunk(words)
  if words[:2] in (["pretrain", "train"], ["pretrain", "sweep"]) and _workdir(words):
    # A page shows other runs in one workdir (runs/mine), as alternatives: each starts afresh here.
    shutil.rmtree(_workdir(words), ignore_errors=True)
  devices = _needs_devices(command)
  if devices or words[1:2] == ["-m"]:  # A module run as __main__ registers lm-eval's model type a second time here.
    result = _run_apart(command, devices or 1)
    assert result.returncode == 0, f"{shlex.join(command)} ({page}):\n{result.stderr[-3000:]}"
    return
  status = _run_here(command)
  captured = capfd.readouterr()
  assert status == 0, f"{shlex.join(command)} ({page}) exits {status}:\n{captured.err[-3000:]}"


def test_every_command_is_run_or_listed():
  """A command the pages no longer show leaves its NOT_RUN row stale."""
  shown = {shlex.join(w) for _, w in COMMANDS}
  assert not set(NOT_RUN) - shown, set(NOT_RUN) - shown
