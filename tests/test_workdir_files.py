"""A run's workdir files cut or damaged by something other than the run: a metrics.jsonl whose last line was cut
(read without it), a damaged line before it (one error naming the line), a run.lock of garbage bytes (taken as a
stale run's lock). The damaged config.json and a file where checkpoints/ goes are cases of test_bad_inputs.py."""

import json

import pytest

from pretrain import cli
from pretrain.system.errors import UserError
from pretrain.train import metrics
from pretrain.workdir.lock import LOCK_FILE, WorkdirLock


def _records(n: int) -> str:
  return "".join(json.dumps({"step": s, "train/loss": 5.0 - s, "eval/loss": 5.0 - s}) + "\n" for s in range(1, n + 1))


def test_a_cut_last_metrics_line_is_left_out_and_the_curves_drawn(tmp_path, capsys):
  (tmp_path / metrics.METRICS_FILE).write_text(_records(4) + '{"step": 5, "train/lo')
  assert [r["step"] for r in metrics.read(str(tmp_path))] == [1, 2, 3, 4]
  assert "its last line, is cut short" in capsys.readouterr().out
  assert cli.main(["plot", f"--workdir={tmp_path}"]) == 0
  assert (tmp_path / metrics.CURVES_FILE).stat().st_size > 0


def test_a_damaged_metrics_line_before_the_last_is_named(tmp_path):
  (tmp_path / metrics.METRICS_FILE).write_bytes(_records(2).encode() + b"\xff\xfe garbage\n" + _records(1).encode())
  with pytest.raises(UserError, match=r"metrics.jsonl:3 is not a metrics record .*delete that line"):
    metrics.read(str(tmp_path))


@pytest.mark.parametrize("garbage", [b"\x00\xff\xfe\x81garbage", b"not json", b"[1, 2]"])
def test_a_lock_of_garbage_is_taken_as_stale(tmp_path, capsys, garbage):
  (tmp_path / LOCK_FILE).write_bytes(garbage)
  with WorkdirLock(str(tmp_path)):
    assert json.loads((tmp_path / LOCK_FILE).read_text())["token"]
  assert not (tmp_path / LOCK_FILE).exists()
  assert "is not a lock this project wrote" in capsys.readouterr().out
