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

from pretrain.system import files
from pretrain.system.console import log

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


def read(workdir: str) -> dict | None:
  """The run's account, None if it has none; one that cannot be read (a copy cut short, an edit) is named in a
  warning and read as none: it is an account of the time, nothing to resume from."""
  path = os.path.join(workdir, GOODPUT_FILE)
  if not files.exists(path):
    return None
  try:
    record = json.loads(files.read_bytes(path))
    if not isinstance(record, dict) or not isinstance(record.get("attempts"), list):
      raise ValueError("not a goodput record")
    return record
  except ValueError as e:
    log(f"warning: {path} cannot be read ({e}); the account starts again from this process")
    return None


class Goodput:
  """This attempt's account, added to the run's (`write` on process 0 only)."""

  def __init__(self, workdir: str, write: bool = True):
    self.path, self._write = os.path.join(workdir, GOODPUT_FILE), write
    self.record = (read(workdir) if write else None) or {"attempts": [], "ledger": {"0": 0.0}, "clock": 0.0,
                                                         "recomputed": 0.0, "rolled_back": 0.0}
    self.attempt = {"started": process_started(), "updated": None, "steps": None, **{p: 0.0 for p in PHASES}}
    self.record["attempts"].append(self.attempt)
    self._mark = self.attempt["started"]

  def mark(self, phase: str) -> None:
    """The time since the last mark was spent on `phase`."""
    now = time.time()
    self.attempt[phase] += now - self._mark
    if phase == "step":
      self.record["clock"] += now - self._mark
    self._mark = now

  def resumed(self, step: int) -> None:
    """Training starts at `step`: the productive step time since that checkpoint was recomputed work."""
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
  # Step time not yet classified: a killed attempt's steps past its last write are in "between attempts".
  spent["between attempts"] = sum(max(b["started"] - a["updated"], 0.0) for a, b in zip(attempts, attempts[1:]))
  wall = attempts[-1]["updated"] - attempts[0]["started"] if attempts else 0.0
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
