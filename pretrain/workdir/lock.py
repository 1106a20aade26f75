"""One training run per workdir: a lock file naming the run that holds it.

WORKDIR/run.lock holds the holder's host, pid, start time and a heartbeat
that a thread refreshes every HEARTBEAT_SECONDS. A second run refuses to start
while the lock is live. A lock is stale, and taken over, when its process is
gone (same host: whatever its heartbeat, as a suspended run is alive) or, on
another host, its heartbeat is older than LEASE_SECONDS (a killed or preempted
VM leaves its lock behind).

On a local disk the lock is created with O_EXCL, so two starts cannot both
win. Object stores (gs://) have no exclusive create (pretrain/system/files.py): there
the lock is a lease, written and read back after a pause, so that of two runs
starting within a few seconds the later writer wins and the other refuses;
the heartbeat keeps the lease of a long run.

Process 0 of a multi-process run takes the lock; every process learns the
outcome, so a refused job stops on all hosts.
"""

import datetime
import json
import os
import socket
import threading
import time
import uuid

import jax
from jax.experimental import multihost_utils
import numpy as np
from pretrain.system import aside, files
from pretrain.system.console import log
from pretrain.system.errors import UserError

LOCK_FILE = "run.lock"
HEARTBEAT_SECONDS = 30.0
LEASE_SECONDS = 300.0   # A heartbeat older than this is a dead run's.
SETTLE_SECONDS = 2.0    # Object stores: wait this long before reading a written lease back.


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # Another user's process.
    return True
  return True


def _well_formed(holder) -> bool:
  """Whether `holder` reads as a lock this project wrote: a heartbeat that is a time, a pid that is a number."""
  return (isinstance(holder, dict) and isinstance(holder.get("heartbeat", 0), (int, float))
          and isinstance(holder.get("pid", -1), int) and not isinstance(holder.get("pid", -1), bool))


def _started(pid: int) -> float | None:
  """When process `pid` started, in seconds since the epoch (Linux's /proc); None where that cannot be read."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # Field 22, starttime: the 20th after the command's name.
    with open("/proc/stat") as f:
      boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
  except (OSError, ValueError, IndexError, StopIteration):
    return None
  return boot + ticks / os.sysconf("SC_CLK_TCK")


def _stale(holder: dict) -> bool:
  """Whether the lock's run is gone. On this host its process says so, whatever the heartbeat (a run suspended
  with Ctrl-Z past the lease is alive): gone, or its pid taken by a process started after the lock. On another
  host, a heartbeat older than the lease."""
  if holder.get("host") != socket.gethostname():
    return time.time() - holder.get("heartbeat", 0) > LEASE_SECONDS
  pid = holder.get("pid", -1)
  if not _alive(pid):
    return True
  started = _started(pid)
  try:
    locked = datetime.datetime.fromisoformat(holder["started"]).timestamp()
  except (KeyError, TypeError, ValueError):
    return False
  return started is not None and started > locked + 1  # The lock is written after its process starts.


def _describe(holder: dict, path: str) -> str:
  return (f"the workdir is in use by the run of pid {holder.get('pid')} on host {holder.get('host')}, started "
          f"{holder.get('started')} (lock {path}); wait for it to end or stop it, or choose another --workdir")


class WorkdirLock:
  def __init__(self, workdir: str):
    self.path = os.path.join(workdir, LOCK_FILE)
    self.me = {"host": socket.gethostname(), "pid": os.getpid(), "token": uuid.uuid4().hex,
               "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}
    self._stop = threading.Event()
    self._thread = None

  def _record(self) -> bytes:
    return json.dumps({**self.me, "heartbeat": time.time()}).encode()

  def _holder(self) -> dict | None:
    if files.isdir(self.path):  # Not a lock: no run holds the workdir through it.
      aside.move(self.path, "is a directory, not a lock", "the run takes the workdir's lock")
      return None
    try:
      holder = json.loads(files.read_bytes(self.path))
    except files.not_found():
      return None
    except ValueError:  # Being written (empty or torn), or damaged: no live holder.
      holder = None
    if _well_formed(holder):
      return holder
    if files.exists(self.path) and files.size(self.path) > 0:
      log(f"warning: {self.path} is not a lock this project wrote; it is taken as a stale run's lock")
    return {}

  def _take_local(self) -> None:
    while True:
      try:
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
      except FileExistsError:
        holder = self._holder()
        if holder is None:
          continue  # Released meanwhile.
        if holder and not _stale(holder):
          raise UserError(_describe(holder, self.path)) from None
        try:  # Aside, not deleted: of two runs taking over a stale lock, only one renames it.
          os.rename(self.path, f"{self.path}.stale-{self.me['token']}")
          os.remove(f"{self.path}.stale-{self.me['token']}")
        except FileNotFoundError:
          pass
        continue
      try:
        with os.fdopen(fd, "wb") as f:
          f.write(self._record())
      except OSError as e:  # A full disk: no empty lock is left behind.
        files.remove(self.path)
        raise UserError(f"the workdir's lock {self.path} could not be written ({files.reason(e)})",
                        fix="free space there, or choose another --workdir") from None
      return

  def _take_lease(self) -> None:
    holder = self._holder()
    if holder and not _stale(holder):
      raise UserError(_describe(holder, self.path))
    files.write_atomically(self.path, self._record())
    time.sleep(SETTLE_SECONDS)
    holder = self._holder()
    if holder and holder.get("token") != self.me["token"]:
      raise UserError(_describe(holder, self.path))

  def _beat(self) -> None:
    while not self._stop.wait(HEARTBEAT_SECONDS):
      files.write_atomically(self.path, self._record())

  def __enter__(self):
    refusal = ""
    if jax.process_index() == 0:
      files.makedirs(os.path.dirname(self.path))
      try:
        self._take_local() if files.local(self.path) else self._take_lease()
      except UserError as e:
        refusal = str(e)
    if jax.process_count() > 1:  # Every process stops if process 0 was refused.
      refused = multihost_utils.broadcast_one_to_all(np.int32(bool(refusal)))
      if refused and not refusal:
        raise UserError(f"process 0 could not lock the workdir ({self.path}); see its message", every_process=True)
    if refusal:
      raise UserError(refusal, every_process=jax.process_count() > 1)
    if jax.process_index() == 0:
      self._thread = threading.Thread(target=self._beat, daemon=True)
      self._thread.start()
    return self

  def __exit__(self, *exc):
    if self._thread is None:
      return
    self._stop.set()
    self._thread.join()
    holder = self._holder()
    if holder and holder.get("token") == self.me["token"]:
      files.remove(self.path)
