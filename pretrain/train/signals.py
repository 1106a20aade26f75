"""SIGTERM, the first Ctrl-C and a reader of the output gone (StopRequest.reader_gone, which
pretrain/system/console.py calls) become a request to checkpoint and stop, which the processes of a run agree on
(StopRequest.agreed); a second Ctrl-C stops at once.

SIGPIPE itself stays ignored, as Python sets it: the kernel sends it for a write to any closed pipe or socket of
the process, including those a library closes and ignores the error of (asyncio's wake-up sockets in Orbax's
threads), so it does not say that the output's reader went away."""

import signal
import threading

import jax
from jax.experimental import multihost_utils
import numpy as np

from pretrain.system.console import log

_WHY = {signal.SIGTERM: "Received SIGTERM", signal.SIGINT: "Received SIGINT"}
GONE = signal.SIGPIPE  # A reader gone stops the run as a shell's SIGPIPE would: exit code 128 + 13.


def sigterm_ends_at_once() -> None:
  """SIGTERM before the training loop's StopRequest ends the process at once, as SIGKILL would (every write of a
  run survives one), and says nothing, as Ctrl-C there does: libtpu, which JAX's start loads wherever it is
  installed, puts absl's failure handler on SIGTERM, which printed a native stack dump as for a crash. Call once
  JAX's backend has started; a SIGTERM the process was told to ignore stays ignored."""
  if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # Python's view was already the default; libtpu's handler goes.


class StopRequest:
  def __init__(self):
    self.signal = None
    self._previous = {}

  def __enter__(self):
    for sig in _WHY:
      self._previous[sig] = signal.signal(sig, self._handle)
    return self

  def _handle(self, signum, frame):
    del frame
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # A second Ctrl-C ends the process at once, even in native code.
    if self.signal is None:  # The first one says why the run stops (its exit code: 128 + it).
      self.signal = signum
      log(f"{_WHY[signum]}: saving a checkpoint, then stopping (Ctrl-C again to stop at once).")

  def reader_gone(self) -> None:
    """A write of the loop found its reader gone (console.Output): save and stop, unless a signal already asked."""
    if self.signal is None:
      self.signal = GONE
      log("The output's reader went away: saving a checkpoint, then stopping.")

  def agreed(self, step: int, every: int) -> int | None:
    """The signal that stops the run at `step`, as every process sees it: at once in a run of one process; in a
    run of several, every `every` steps, one that any process received (each host's arrives at its own moment, and
    the save that follows is a collective they must all enter at the same step)."""
    if jax.process_count() == 1:
      return self.signal
    if step % every:
      return None
    return int(np.max(multihost_utils.process_allgather(np.int32(self.signal or 0)))) or None

  def __exit__(self, *exc):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
