"""Messages to the person running a command: from the first process only, above any progress bar.

A reader of the output that goes away (`pretrain train | head`, or a `| tee` that the same Ctrl-C ended) fails the
next write with BrokenPipeError. Raised in a training step (by a signal handler's message, a progress bar, an
evaluation's output), it would lose the steps since the last checkpoint. So the training loop writes through
Output, which sends a stream whose reader has gone to /dev/null and tells the loop, which saves and stops
(pretrain/train/signals.py: StopRequest.reader_gone). Elsewhere the error is raised, and the command ends quietly
(cli.entry), with nothing to save.
"""

import os
import sys

import jax
import tqdm


def log(message: str) -> None:
  if jax.process_index() == 0:
    tqdm.tqdm.write(message)
    sys.stdout.flush()  # Now, not when a pipe's buffer fills or the process ends: a reader gone shows here.


class Output:
  """sys.stdout or sys.stderr as the training loop writes them (contextlib.redirect_stdout): quiet once their
  reader has gone (above), when they call on_gone()."""

  def __init__(self, stream, on_gone=lambda: None):
    self._stream = stream
    self._on_gone = on_gone

  def write(self, text: str):
    try:
      return self._stream.write(text)
    except BrokenPipeError:
      return self._reader_gone()

  def flush(self) -> None:
    try:
      self._stream.flush()
    except BrokenPipeError:
      self._reader_gone()

  def _reader_gone(self) -> None:
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, self._stream.fileno())  # Its later text (and what its buffer holds) goes nowhere, without error.
    os.close(null)
    self._on_gone()

  def __getattr__(self, name):  # isatty, fileno, encoding: the stream's.
    return getattr(self._stream, name)

  # tqdm.write clears the bars drawn on sys.stderr or sys.stdout, which it finds by equality.
  def __eq__(self, other):
    return self._stream is getattr(other, "_stream", other)

  def __hash__(self):
    return hash(self._stream)
