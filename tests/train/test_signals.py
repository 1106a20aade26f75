"""What stops a training run to save: a signal, or the output's reader gone; not a broken pipe of a library."""

import contextlib
import os
import signal
import socket

from pretrain.system import console
from pretrain.train import signals


def test_a_librarys_broken_pipe_does_not_stop_the_run():
  """asyncio (in Orbax's threads) writes to a wake-up socket it may have closed and ignores the error; the kernel's
  SIGPIPE for it once stopped a resumed run at random (exit 141)."""
  with signals.StopRequest() as stop:
    closed, writer = socket.socketpair()
    closed.close()
    with contextlib.suppress(OSError):
      writer.send(b"\0")
    writer.close()
    assert stop.signal is None


def test_the_outputs_reader_gone_stops_the_run_and_its_later_writes_go_nowhere():
  read_end, write_end = os.pipe()
  os.close(read_end)
  with signals.StopRequest() as stop, os.fdopen(write_end, "w") as stream:
    output = console.Output(stream, stop.reader_gone)
    output.write("step 1\n")
    output.flush()
    assert stop.signal == signal.SIGPIPE  # The exit code a shell expects: 128 + 13.
    output.write("step 2\n")
    output.flush()  # No error: the stream now writes to /dev/null.


def test_a_signal_that_came_first_stays_the_reason():
  with signals.StopRequest() as stop:
    os.kill(os.getpid(), signal.SIGTERM)
    stop.reader_gone()
    assert stop.signal == signal.SIGTERM
  assert signal.getsignal(signal.SIGTERM) is not stop._handle  # pylint: disable=protected-access
