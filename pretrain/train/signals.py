"""SIGTERM and the first Ctrl-C become a request to checkpoint and stop; a second Ctrl-C stops at once."""

import signal

from pretrain.system.console import log


class StopRequest:
  def __init__(self):
    self.signal = None
    self._previous = {}

  def __enter__(self):
    for sig in (signal.SIGTERM, signal.SIGINT):
      self._previous[sig] = signal.signal(sig, self._handle)
    return self

  def _handle(self, signum, frame):
    del frame
    self.signal = signum
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # A second Ctrl-C ends the process at once, even in native code.
    log(f"Received {signal.Signals(signum).name}: saving a checkpoint, then stopping (Ctrl-C again to stop at once).")

  def __exit__(self, *exc):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
