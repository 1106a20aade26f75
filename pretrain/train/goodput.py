"""Goodput: where a run's wall time went, across its restarts (WORKDIR/goodput.json, `pretrain goodput`).

Each process that trains the run (an attempt) splits its time, from the moment it started, into consecutive
phases: startup (imports, data, model), checkpoint (restores and the blocking part of saves), compile (the first
step), data (waiting for a batch), step, eval, rollback (the spike guard's restore) and finish (the final
evaluation, samples and report). The step time is productive only if its steps lead to the final state: a ledger
holds the productive step time at each checkpoint, so a restart counts the previous attempt's steps past its last
checkpoint as recomputed, and a rollback counts the steps it discards as rolled back. Time between attempts (the
job down, or the last moments of a killed attempt) is counted as such. Goodput is the productive step time over the
whole wall time, from the first attempt's start to the last update.
"""

import json
import os
import time
import uuid

from pretrain.system import aside, files
from pretrain.system.errors import UserError

GOODPUT_FILE = "goodput.json"
_LEDGER = 16  # Checkpoints whose productive time is kept (more than any run keeps, for rollbacks and restarts).
PHASES = ("startup", "checkpoint", "compile", "data", "step", "eval", "rollback", "finish")


def process_started() -> float:
  """The wall time at which this process started (Linux's /proc, to 10 ms), else the import of this module."""
  try:
    with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
      ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
      return time.time() - (float(uptime.read().split()[0]) - ticks / os.sysconf("SC_CLK_TCK"))
  except (OSError, ValueError, IndexError):
    return _IMPORTED


_IMPORTED = time.time()


def _number(value) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_attempt(attempt) -> bool:
  if not isinstance(attempt, dict):
    return False
  steps, updated = attempt.get("steps"), attempt.get("updated")
  steps_ok = steps is None or (isinstance(steps, list) and len(steps) == 2 and all(isinstance(s, int) for s in steps))
  return (_number(attempt.get("started")) and all(_number(attempt.get(p)) for p in PHASES)
          and (updated is None or _number(updated)) and steps_ok)


def _problem(record) -> str:
  """What makes `record` (read from JSON) not an account this module wrote, '' if nothing."""
  if not isinstance(record, dict):
    return f"a {type(record).__name__}, not a record"
  if not all(_number(record.get(key)) for key in ("clock", "recomputed", "rolled_back")):
    return "its clock, recomputed or rolled_back is not a number"
  ledger, attempts = record.get("ledger"), record.get("attempts")
  if not (isinstance(ledger, dict) and all(k.isdigit() and _number(v) for k, v in ledger.items())):
    return "its ledger is not {step: seconds}"
  if not (isinstance(attempts, list) and all(map(_is_attempt, attempts))):
    return "its attempts are not a list of {started, updated, steps, and seconds by phase}"
  if not isinstance(record.get("run", ""), str):
    return "its run is not a run id"
  return ""


def _load(path: str) -> tuple[dict | None, str]:
  """(the account in `path`, None if there is none or it is damaged; what is wrong with it, '' if nothing)."""
  if not files.exists(path):
    return None, ""
  if files.isdir(path):
    return None, "is a directory, not the run's account"
  try:
    record = json.loads(files.read_bytes(path))
  except (ValueError, *files.errors()) as e:  # Not JSON, not UTF-8 (a copy cut short, an edit), unreadable.
    return None, f"cannot be read ({files.reason(e)})"
  problem = _problem(record)
  return (None, f"is not a goodput account ({problem})") if problem else (record, "")


def read(workdir: str) -> dict | None:
  """The run's account for a command that only reads it (pretrain goodput), None if it has none; a damaged one is
  a UserError (training moves it aside as it next starts: it is an account of the time, nothing to resume from)."""
  path = os.path.join(workdir, GOODPUT_FILE)
  record, problem = _load(path)
  if problem:
    raise UserError(f"{path} {problem}; it is no account of this run's time (the run's next start moves it aside "
                    "and starts a new account)")
  return record


def _new(run: str) -> dict:
  return {"run": run, "attempts": [], "ledger": {"0": 0.0}, "clock": 0.0, "recomputed": 0.0, "rolled_back": 0.0}


class Goodput:
  """This attempt's account, added to the run's (`write` on process 0 only). `run`: the run id its newest
  checkpoint records (None: none, or an older checkpoint without one), `checkpointed`: whether it resumes from one.

  The run's goodput.json continues, unless it is damaged (it cannot be read, or is not an account) or another
  run's (its run id is not the checkpoint's; or the run has no checkpoint, but the account's ledger holds some):
  then it is moved aside with one line (pretrain/system/aside.py) as training starts (resumed), and a new account
  starts. `run` is the run id, which each checkpoint records (checkpoint.Checkpointer.records)."""

  def __init__(self, workdir: str, write: bool = True, run: str | None = None, checkpointed: bool = False):
    self.path, self._write = os.path.join(workdir, GOODPUT_FILE), write
    self.checkpoints_gone = ""  # Else the run the workdir's account is of, whose checkpoints are gone.
    record, self._aside = self._own(run, checkpointed) if write else (None, None)
    self.run = run or (record or {}).get("run") or uuid.uuid4().hex[:12]
    self.record = record or _new(self.run)
    self.record["run"] = self.run
    self.attempt = {"started": process_started(), "updated": None, "steps": None, **{p: 0.0 for p in PHASES}}
    self.record["attempts"].append(self.attempt)
    self._mark = self.attempt["started"]

  def _own(self, run: str | None, checkpointed: bool) -> tuple[dict | None, tuple | None]:
    """(the account in goodput.json if it is this run's, else None; what is wrong with it, to move it aside when
    training starts, None if nothing)."""
    record, problem = _load(self.path)
    tag = "damaged"
    if record is not None:
      theirs, saved = record.get("run"), [s for s in record["ledger"] if s != "0"]
      if run and theirs and theirs != run:
        problem = f"is the account of another run (run {theirs}; the checkpoints here are run {run}'s)"
      elif not checkpointed and saved:
        problem = f"is the account of another run (one with checkpoints of steps {', '.join(saved)}; here are none)"
        self.checkpoints_gone = f"a run with checkpoints of steps {', '.join(saved)}, none of them here"
      tag = "other-run" if problem else tag
    return (None, (problem, tag)) if problem else (record, None)

  def mark(self, phase: str) -> None:
    """The time since the last mark was spent on `phase`."""
    now = time.time()
    self.attempt[phase] += now - self._mark
    if phase == "step":
      self.record["clock"] += now - self._mark
    self._mark = now

  def resumed(self, step: int) -> None:
    """Training starts at `step`: the productive step time since that checkpoint was recomputed work. A goodput.json
    that is not this run's account is moved aside now (nothing in the workdir changes before the restore)."""
    if self._aside and files.exists(self.path):
      aside.move(self.path, self._aside[0], "the account starts again from this process", self._aside[1])
    ledger = self.record["ledger"]
    self.record["ledger"] = {s: t for s, t in ledger.items() if int(s) <= step}
    at = ledger.get(str(step), self.record["clock"])  # A checkpoint from before this file: nothing known.
    self.record["recomputed"] += max(self.record["clock"] - at, 0.0)
    self.record["clock"] = at
    self.attempt["steps"] = [step, step]

  def rolled_back(self, step: int) -> None:
    """The spike guard went back to `step`: the step time since then is rolled back."""
    at = self.record["ledger"].get(str(step), 0.0)
    self.record["rolled_back"] += self.record["clock"] - at
    self.record["clock"] = at
    self.record["ledger"] = {s: t for s, t in self.record["ledger"].items() if int(s) <= step}
    self.attempt["steps"][1] = step

  def saved(self, step: int) -> None:
    """A checkpoint of `step` is saved: its productive step time so far, kept for the newest checkpoints."""
    ledger = self.record["ledger"]
    ledger[str(step)] = self.record["clock"]
    self.record["ledger"] = {s: ledger[s] for s in ["0", *sorted(ledger, key=int)[-_LEDGER:]]}

  def reached(self, step: int) -> None:
    self.attempt["steps"][1] = step

  def finished(self) -> None:
    """The attempt ran to train.steps: the time until a later command extends the run is no one's downtime."""
    self.attempt["finished"] = True

  def write(self) -> dict:
    """Writes goodput.json as of the last mark; returns its summary."""
    self.attempt["updated"] = self._mark
    if self._write:
      files.write_atomically(self.path, json.dumps(self.record, indent=1).encode())
    return summary(self.record)


def summary(record: dict) -> dict:
  """Seconds by what they were spent on, over all attempts, the wall time and the goodput."""
  attempts = [a for a in record["attempts"] if a["updated"]]
  spent = {p: sum(a[p] for a in attempts) for p in PHASES if p != "step"}
  spent["productive steps"] = record["clock"]
  spent["recomputed after restarts"] = record["recomputed"]
  spent["rolled back"] = record["rolled_back"]
  # Step time not yet classified: a killed attempt's steps past its last write are in "between attempts". The
  # time after an attempt that finished the run, before a command extended it, is in nothing, the wall included.
  gaps = [(max(b["started"] - a["updated"], 0.0), a.get("finished", False)) for a, b in zip(attempts, attempts[1:])]
  spent["between attempts"] = sum(gap for gap, finished in gaps if not finished)
  wall = attempts[-1]["updated"] - attempts[0]["started"] - sum(gap for gap, finished in gaps if finished) \
      if attempts else 0.0
  return {"wall": wall, "seconds": spent, "goodput": record["clock"] / wall if wall else 0.0,
          "attempts": len(attempts)}


def line(summary_: dict) -> str:
  """One line: the goodput and the largest of the rest."""
  wall, seconds = summary_["wall"], summary_["seconds"]
  rest = sorted(((t, name) for name, t in seconds.items() if name != "productive steps" and t >= 0.005 * wall),
                reverse=True)
  return (f"Goodput {summary_['goodput']:.0%}: productive steps {seconds['productive steps']:,.1f} s of {wall:,.1f} s "
          f"over {summary_['attempts']} attempt{'s' if summary_['attempts'] > 1 else ''}; "
          + ", ".join(f"{name} {t:,.1f} s" for t, name in rest) + " (pretrain goodput --workdir=... for all)")


def table(summary_: dict) -> str:
  """The summary as a table: each use of the time, its seconds and share of the wall time."""
  wall = summary_["wall"]
  rows = [f"{'':28}{'seconds':>10}{'share':>8}"]
  rows += [f"{name:28}{t:>10,.1f}{t / wall if wall else 0:>8.1%}" for name, t in summary_["seconds"].items()]
  rows += [f"{'wall time':28}{wall:>10,.1f}{1 if wall else 0:>8.1%}",
           f"goodput {summary_['goodput']:.1%} over {summary_['attempts']} attempt(s)"]
  return "\n".join(rows)
