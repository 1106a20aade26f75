"""pretrain sweep: a grid of config overrides, a run per point, continued where a killed sweep stopped, reported
with the mean and interval over the seed axis."""

import csv
import os
import subprocess
import sys
import time

import pytest

from pretrain.experiments import sweep as sweep_command, sweep_grid as sweep
from pretrain.system.errors import UserError
from tests.conftest import REPO, TINY


@pytest.mark.slow
def test_grid_values_and_point_names():
  assert sweep.split_values("0.1, 0.15,((0, 1), (2, 3)),'a,b'") == ["0.1", "0.15", "((0, 1), (2, 3))", "'a,b'"]
  grid, rest = sweep.parse_grid(["--grid.data.mlm_rate=0.1,0.3", "--config.train.steps=5", "--grid.train.seed=0,1"])
  assert grid == {"data.mlm_rate": ["0.1", "0.3"], "train.seed": ["0", "1"]} and rest == ["--config.train.steps=5"]
  assert [name for name, _ in sweep.point_names(grid)] == [
      "mlm_rate=0.1,seed=0", "mlm_rate=0.1,seed=1", "mlm_rate=0.3,seed=0", "mlm_rate=0.3,seed=1"]
  # Fields of one name in two sections are named by their whole path.
  names = sweep.point_names({"train.seed": ["0"], "data.seed": ["1"]})
  assert names == [("train.seed=0,data.seed=1", {"train.seed": "0", "data.seed": "1"})]
  assert sweep.is_seed("train.seed") and not sweep.is_seed("data.mlm_rate")


@pytest.mark.slow
def test_a_rerun_with_its_grid_flags_in_another_order_names_the_points_as_before(tmp_path):
  grid, _ = sweep.parse_grid(["--grid.data.mlm_rate=0.1,0.3", "--grid.train.seed=0,1"])
  sweep.check_manifest(str(tmp_path), [], grid)
  swapped, _ = sweep.parse_grid(["--grid.train.seed=0,1", "--grid.data.mlm_rate=0.1,0.3"])
  assert sweep.point_names(sweep.in_saved_order(str(tmp_path), swapped)) == sweep.point_names(grid)
  other, _ = sweep.parse_grid(["--grid.train.seed=0,2", "--grid.data.mlm_rate=0.1,0.3"])
  assert list(sweep.in_saved_order(str(tmp_path), other)) == ["train.seed", "data.mlm_rate"]  # Not the same.


@pytest.mark.slow
@pytest.mark.parametrize("argv, message", [
    (["--grid.data.mlm_rate"], "write --grid.SECTION.FIELD=VALUE1,VALUE2"),
    (["--grid.data.mlm_rate=0.1,,0.2"], "write --grid.SECTION.FIELD=VALUE1,VALUE2"),
    (["--grid.train.seed=0,0"], "a value repeats"),
    (["--grid.train.seed=0", "--grid.train.seed=1"], "given twice"),
])
def test_a_malformed_grid_is_refused(argv, message):
  with pytest.raises(UserError, match=message):
    sweep.parse_grid(argv)


@pytest.mark.slow
@pytest.mark.parametrize("argv, message", [
    # A value the config refuses, named as the --grid flag it came in.
    (["--grid.data.mlm_rate=0.1,1.5", "--config.data.objective=mlm"],
     "point mlm_rate=1.5: data.mlm_rate must be in (0, 1), got 1.5; set --grid.data.mlm_rate to such a value"),
    # A field both fixed and swept: the grid's values would replace the other's without a word.
    (["--config.data.objective=mlm", "--config.data.mlm_rate=0.2", "--grid.data.mlm_rate=0.15,0.4"],
     "--config.data.mlm_rate and --grid.data.mlm_rate both set data.mlm_rate"),
    # A rule between fields that only the grid's second point breaks.
    (["--config.model.parameterization=mup", "--grid.optimizer.name=adamw,adafactor"],
     "mup is defined for optimizer.name"),
    (["--grid.train.seed=0,00"], "the grid's points seed=0 and seed=00 give the same config (one run twice)"),
    # A grid over a setting of an objective its runs do not train (MLM's rate on a causal LM): the point off the
    # default is refused, as train refuses it.
    (["--grid.data.mlm_rate=0.15,0.4"], "data.mlm_rate=0.4 is read only by mlm and nsp and sop and electra, which "
     "this config does not train or evaluate"),
    (["--grid.data.mlm_rate=0.15,0.4", "--grid.data.objective=clm,mlm"], "data.mlm_rate=0.4 is read only by mlm"),
    (["--grid.mesh.fsdp=1,2"], "point fsdp=2: mesh {'data': -1, 'stage': 1, 'fsdp': 2"),  # On this process's one device.
    # A mistyped key, named as the flag it came in.
    (["--grid.train.sed=0,1"], "unknown config key 'train.sed'; did you mean --grid.train.seed?"),
])
def test_every_point_is_checked_before_any_trains(tmp_path, capsys, argv, message):
  with pytest.raises(SystemExit):  # exit_on_user_error: one error line, exit 2
    sweep_command.main([f"--workdir={tmp_path}/s", *argv])
  assert message in capsys.readouterr().err
  assert not os.path.exists(tmp_path / "s")


@pytest.mark.slow
def test_a_sweep_reports_each_point_continues_after_a_kill_and_reports_over_seeds(tmp_path, cache_dir, vocabulary,
                                                                                capsys):
  """The report is there (partial) once the first point finishes; a sweep killed in its second point's training
  continues it, that point's train.log keeping the killed attempt's output; the report gives the seeds' mean."""
  del vocabulary
  where = tmp_path / "sweep"
  argv = [f"--workdir={where}", f"--config.data.cache_dir={cache_dir}", *TINY, "--config.train.steps=3",
          "--config.train.eval_every=3", "--config.train.checkpoint_every=1", "--probe=same_document",
          "--probe_seeds=2", "--grid.train.seed=0,1"]
  sweep = subprocess.Popen([sys.executable, "-m", "pretrain", "sweep", *argv], cwd=REPO, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
  deadline = time.time() + 600
  while not ((where / "sweep.md").exists() and (where / "seed=1" / "checkpoints" / "1").exists()):
    assert sweep.poll() is None and time.time() < deadline, sweep.communicate()[0][-3000:]
    time.sleep(0.01)
  sweep.kill()
  out = sweep.communicate()[0]
  assert "[1/2] seed=0: finished; the report so far: " in out and "[2/2] seed=1: training" in out
  assert "Partial: 1 of 2 points finished" in (where / "sweep.md").read_text()
  with open(where / "sweep.csv") as f:
    rows = list(csv.DictReader(f))
  assert float(rows[0]["eval/loss"]) > 0 and rows[1]["eval/loss"] == ""
  assert (where / "sweep.png").stat().st_size > 0
  first = os.path.getmtime(where / "seed=0" / "metrics.jsonl")
  sweep_command.main(argv)
  out = capsys.readouterr().out
  assert "[1/2] seed=0: finished before" in out and "[2/2] seed=1: training" in out
  assert os.path.getmtime(where / "seed=0" / "metrics.jsonl") == first
  killed, resumed = (where / "seed=1" / "train.log").read_text().split("=== attempt 2, started ")
  assert killed.startswith("=== attempt 1, started ") and "step" in killed
  assert "Resuming from the checkpoint at step " in resumed
  with open(where / "sweep.csv") as f:
    rows = list(csv.DictReader(f))
  assert [r["point"] for r in rows] == ["seed=0", "seed=1"] and all(float(r["eval/loss"]) > 0 for r in rows)
  assert all(0 < float(r["probe/same_document_probe"]) < 1 and r["probe/same_document_probe/init"] for r in rows)
  report = (where / "sweep.md").read_text()
  mean = (float(rows[0]["eval/loss"]) + float(rows[1]["eval/loss"])) / 2
  assert "| 2 | " in report and f"{mean:.3f} +- " in report  # One setting, two seeds: mean and interval.
  assert "artial" not in report
  sweep_command.main([f"--workdir={where}", "--report", "--metric=eval/accuracy"])
  assert "eval/accuracy, a difference counts as real" in capsys.readouterr().out
  with pytest.raises(SystemExit):  # Another grid in the same directory would mix two sweeps' runs.
    sweep_command.main([*argv[:-1], "--grid.train.seed=0,1,2"])
  assert "holds another sweep" in capsys.readouterr().err
  with pytest.raises(SystemExit):  # So would another value of a base flag.
    sweep_command.main([*argv, "--config.train.keep_steps=2"])
  assert "holds another sweep" in capsys.readouterr().err
  # The same config written otherwise is the same sweep: its points are finished.
  sweep_command.main([*argv, "--config.train.keep_steps=()"])
  assert "[2/2] seed=1: finished before" in capsys.readouterr().out


@pytest.mark.slow
def test_a_point_that_fails_is_reported_and_the_others_go_on(tmp_path, cache_dir, vocabulary, capsys):
  """Points that fail on their data, or diverge, and one that trains; a failed point's line names its problem
  only: the advice of a run's error (change a setting, then rerun to resume) is the sweep's to give."""
  del vocabulary
  where = tmp_path / "sweep"
  argv = [f"--workdir={where}", f"--config.data.cache_dir={cache_dir}", *TINY, "--config.train.steps=3",
          "--config.data.train_files=/nonexistent/*.txt", "--config.optimizer.warmup_steps=0",
          "--config.optimizer.grad_clip=1e30", "--grid.data.source=files,corpus",
          "--grid.optimizer.learning_rate=1e12,0.003"]
  with pytest.raises(SystemExit) as exited:
    sweep_command.main(argv)
  assert exited.value.code == 2
  captured = capsys.readouterr()
  lines = captured.out.splitlines()
  assert "[1/4] source=files,learning_rate=1e12: failed: " in captured.out
  assert "[4/4] source=corpus,learning_rate=0.003: training" in captured.out
  diverged = next(line for line in lines if line.startswith("[3/4] source=corpus,learning_rate=1e12: failed: "))
  assert "became NaN or Inf at step" in diverged and "rerun" not in diverged and "optimizer." not in diverged
  last = captured.err.strip().splitlines()[-1]
  assert last.startswith("error: 3 of 4 points failed (source=files,learning_rate=1e12: ")
  assert "matches no files" in last
  assert "became NaN or Inf" in last and "lower optimizer.learning_rate" not in last
  assert "rerun this command (finished points are kept); to try other settings" in last
  assert "| corpus | 0.003 | 1 |" in (where / "sweep.md").read_text()


@pytest.mark.slow
def test_launch_hands_each_point_to_slurm(tmp_path, capsys):
  sweep_command.main([f"--workdir={tmp_path}/s", "--launch=slurm --nodes=1 --gpus_per_node=8",
                      "--config.train.steps", "7", "--grid.data.seq_len=64,128",  # A value after a space too.
                      "--gin_search_paths", str(tmp_path)])
  out = capsys.readouterr().out
  assert out.count("#SBATCH --nodes=1") == 2
  assert f"--workdir={tmp_path}/s/seq_len=64" in out and "--config.data.seq_len=128" in out
  assert "--config.train.steps=7" in out and "--report" in out and f"--gin_search_paths={tmp_path}" in out


@pytest.mark.slow
def test_a_launched_sweep_on_an_object_store_is_refused_as_another_and_reported(tmp_path, capsys, monkeypatch):
  """A sweep whose points run on a TPU slice keeps its workdir in gs:// (TF's ram:// stands in): sweep.json was
  read with the local filesystem, so a rerun with another grid went unrefused and --report found no sweep. A
  failed launch (here: an sbatch that refuses the job) stopped nothing and said 'When the jobs are done'; --probe, which
  only a sweep trained here runs, was dropped."""
  where = "ram://sweeps/s"
  sweep_command.main([f"--workdir={where}", "--launch=slurm --nodes=1 --gpus_per_node=8",
                      "--config.train.steps", "7", "--grid.data.seq_len=64,128"])  # A value after a space too.
  assert "When the jobs are done" in capsys.readouterr().out
  with pytest.raises(UserError, match="holds another sweep"):
    sweep_command.main.__wrapped__([f"--workdir={where}", "--launch=slurm --nodes=1 --gpus_per_node=8",
                                    "--config.train.steps=7", "--grid.data.seq_len=32,64"])
  with pytest.raises(UserError, match="no point of the sweep in ram://sweeps/s has finished"):
    sweep_command.main.__wrapped__([f"--workdir={where}", "--report"])
  (tmp_path / "bin").mkdir()
  (tmp_path / "bin" / "sbatch").write_text("#!/bin/sh\necho 'sbatch: error: invalid partition' >&2\nexit 1\n")
  (tmp_path / "bin" / "sbatch").chmod(0o755)
  monkeypatch.setenv("PATH", f"{tmp_path}/bin:{os.environ['PATH']}")
  with pytest.raises(UserError, match="launching point seq_len=64 failed"):
    sweep_command.main.__wrapped__([f"--workdir={tmp_path}/t", "--run", "--config.train.steps=7",
                                    f"--launch=slurm --nodes=1 --gpus_per_node=8 --out={tmp_path}/job.sh",
                                    "--grid.data.seq_len=64,128"])
  assert "When the jobs are done" not in capsys.readouterr().out
  with pytest.raises(UserError, match="--probe measures the points that train here"):
    sweep_command.main.__wrapped__([f"--workdir={tmp_path}/u", "--launch=slurm", "--probe=zero_shot",
                                    "--config.train.steps", "7", "--grid.data.seq_len=64,128"])  # A value after a space too.
  (tmp_path / "a_file").write_text("")
  with pytest.raises(UserError, match="cannot be read"):
    sweep_command.main.__wrapped__([f"--workdir={tmp_path}/a_file", "--report"])
