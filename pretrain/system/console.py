"""Messages to the person running a command: from the first process only, above any progress bar.

A reader of the output that goes away (`pretrain train | head`, or a `| tee` that the same Ctrl-C ended) fails the
next write with BrokenPipeError. Raised by a signal handler's message or the step bar, it could land anywhere in a
training step and lose the steps since the last checkpoint. So the stream goes quiet instead, and the process learns
of it as a shell would tell it, by SIGPIPE, which the training loop takes as a request to save and stop
(pretrain/train/signals.py). Where nothing handles SIGPIPE (Python ignores it), the error is raised: the command
ends quietly (cli.entry), with nothing to save.
"""

import os
import signal
import sys

import jax
import tqdm


def log(message: str) -> None:
  if jax.process_index() == 0:
    try:
      tqdm.tqdm.write(message)
    except BrokenPipeError as error:
      _reader_gone(sys.stdout, error)


class Output:
  """A stream for a progress bar (tqdm's `file`) that goes quiet when its reader goes away (above)."""

  def __init__(self, stream):
    self._stream = stream

  def write(self, text: str):
    try:
      return self._stream.write(text)
    except BrokenPipeError as error:
      return _reader_gone(self._stream, error)

  def flush(self) -> None:
    try:
      self._stream.flush()
    except BrokenPipeError as error:
      _reader_gone(self._stream, error)

  def __getattr__(self, name):  # isatty, fileno, encoding: the stream's.
    return getattr(self._stream, name)

  # tqdm.write clears the bars drawn on sys.stderr or sys.stdout, which it finds by equality.
  def __eq__(self, other):
    return self._stream is getattr(other, "_stream", other)

  def __hash__(self):
    return hash(self._stream)


def _reader_gone(stream, error: BrokenPipeError) -> None:
  os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())  # Its later text goes nowhere, without an error.
  if not callable(signal.getsignal(signal.SIGPIPE)):  # No training loop to stop: the command ends.
    raise error
