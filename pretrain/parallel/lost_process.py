"""A lost process ends the run's other processes with one line naming it, not a native crash report.

JAX's coordination service notices a lost process (killed, out of memory, its
host gone): the coordinator hears no heartbeat from it for
--heartbeat_timeout_seconds, or the others can no longer reach the coordinator
(at once if its process died, within that timeout if its host is cut off).
JAX then aborts every other process from C++ (LOG(FATAL): a stack trace,
SIGABRT), which Python can neither catch nor word; on CPUs gloo may abort or
raise first, as soon as a collective with the lost process breaks. (jaxlib
0.10's missed_heartbeat_callback would replace the abort, but its Python
binding dies of std::bad_cast when called.)

So each process's stderr passes through a small relay process (this file, run
as a script: no JAX in it). It passes everything on at once, but holds back a
native error, a native abort or a traceback for a moment: when the process then
ends with JAX's or gloo's report of a lost process, the relay prints one line
naming that process in its place. Output that already reports a lost process
(a collective that broke off, logged or raised in a thread while the run goes
on: gloo's "Connection reset by peer") is held until the process ends, which
JAX's heartbeat check makes sure of. Checkpoints are committed by renaming a
finished temporary directory, so an abort leaves the last committed one intact.
"""

import os
import re
import select
import signal
import subprocess
import sys
import time

# What starts holding output back: a native error or fatal line (absl's "E1127 13:22:42.736018 7313 file.cc:12] "),
# a C++ exception that ends the process (gloo's), a Python traceback (a thread's too) or a command's one-line error
# (gloo's failure raised in Python, e.g. as a checkpoint that could not be written).
_HOLD = re.compile(rb"[EF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w.]+:\d+\] |terminate called after throwing|"
                   rb"Exception in thread |Traceback \(most recent call last\):|error: ")
# What ends the process: a fatal line, a C++ exception, or the stack trace that follows them.
_ABORT = re.compile(rb"F\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w.]+:\d+\] |terminate called after throwing|"
                    rb"\*\*\* Check failure stack trace")
_HOLD_SECONDS = 1.0  # A lost process's report is complete within milliseconds; other errors pass on after this.
# A Python traceback ends with its exception's line, the first after its header that is not indented: printed
# frame by frame, on a loaded machine it can take longer than _HOLD_SECONDS, and is judged once complete.
_TRACEBACK = b"Traceback (most recent call last):"
_TRACEBACK_END = re.compile(rb"Traceback \(most recent call last\):\n(?:[ \t][^\n]*\n)*[^ \t\n][^\n]*\n")
_UNHEALTHY = re.compile(r"stopped sending heartbeats\):\s*(\d[\d\s,]*)")  # The coordinator's list of lost tasks.
_TIMED_OUT = re.compile(r"Task (\d+) heartbeat timeout")
_COORDINATOR_GONE = ("Failed to send RPC to coordination service", "CoordinationService/Heartbeat")
# Gloo's failures when a peer is gone, e.g. "Gloo all-reduce failed: [...] Connection closed by peer [ip]:port".
_GLOO = re.compile(r"terminate called after throwing an instance of 'gloo::|Gloo [\w -]+ failed: .*"
                   r"(Connection reset by peer|Connection closed by peer|Read error|Write error|Broken pipe)")

_relay = None  # The relay's Popen, kept: a Popen collected while its process runs warns.


def _name(process: int, num_processes: int) -> str:
  return f"process {process} of {num_processes}" + (", the coordinator," if process == 0 else "")


def verdict(report: str, process_id: int, num_processes: int) -> str | None:
  """The one line for a process whose native report (what it wrote to stderr as it ended) says that another
  process was lost; None for any other report."""
  fix = "the last committed checkpoint is intact; rerun the same command on all hosts to resume"
  cause = "killed, out of memory, frozen or its host gone: its own log may say which"
  listed = _UNHEALTHY.search(report) or _TIMED_OUT.search(report)
  if listed:
    lost = [int(p) for p in re.findall(r"\d+", listed.group(1))]
    if lost == [process_id]:  # This process itself was silent too long: stalled, or cut off from the coordinator.
      this = _name(process_id, num_processes).rstrip(",")
      return (f"error: the coordinator heard no heartbeat from this process ({this}) within "
              f"--heartbeat_timeout_seconds and ended the run; {fix}")
    lost = [p for p in lost if p != process_id]
    names = " and ".join(_name(p, num_processes) for p in lost).rstrip(",")
    return f"error: lost {names}: no heartbeat came within --heartbeat_timeout_seconds ({cause}); {fix}"
  if any(s in report for s in _COORDINATOR_GONE) and process_id != 0:
    return f"error: lost {_name(0, num_processes).rstrip(',')}: it can no longer be reached ({cause}); {fix}"
  if _GLOO.search(report):  # Gloo names no process: with two, it is the other one.
    who = _name(1 - process_id, 2).rstrip(",") if num_processes == 2 else "a process of the run (gloo names none)"
    return f"error: lost {who}: a collective with it broke off ({cause}); {fix}"
  return None


def _unfinished_traceback(held: bytes) -> bool:
  last = held.rfind(_TRACEBACK)
  return last >= 0 and not _TRACEBACK_END.match(held, last)


def start(process_id: int, num_processes: int, verbose: bool = False) -> None:
  """Sends this process's stderr (Python's and native code's) through the relay. A terminal stays a terminal
  (a pseudo-terminal of its size), so progress bars look the same. `verbose`: pass native reports on too."""
  global _relay
  if os.name != "posix":  # The relay selects on a pipe: POSIX only. Elsewhere JAX's own report stays.
    return
  opened = []
  try:
    if os.isatty(2):
      import fcntl, termios, tty  # pylint: disable=g-import-not-at-top,multiple-imports  (POSIX terminals only)
      opened += os.openpty()
      tty.setraw(opened[1])  # Bytes as written: no newline translation.
      fcntl.ioctl(opened[1], termios.TIOCSWINSZ, fcntl.ioctl(2, termios.TIOCGWINSZ, b"\0" * 8))
    else:
      opened += os.pipe()
    opened.append(os.dup(2))
    # In a session of its own, so the terminal's Ctrl-C and hang-up go to the trainer only.
    _relay = subprocess.Popen([sys.executable, os.path.abspath(__file__), str(process_id), str(num_processes),
                               str(int(verbose))], stdin=opened[0], stdout=opened[2], start_new_session=True)
    sys.stderr.flush()
    os.dup2(opened[1], 2)
  except Exception:  # pylint: disable=broad-except  (no relay: JAX's own report, then)
    pass
  for fd in opened:
    os.close(fd)


def _relay_main(process_id: int, num_processes: int, verbose: bool) -> None:
  """Copies stdin to stdout until the process that writes it ends (see the module's docstring)."""
  for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # A stop is the trainer's to act on; this relays.
    signal.signal(sig, signal.SIG_IGN)
  parent = os.getppid()
  held, since = b"", None  # Output held back, and since when.
  last = [b"\n"]  # The last byte passed on.

  def write(data: bytes) -> None:
    last[0] = data[-1:] or last[0]
    while data:
      data = data[os.write(1, data):]

  while True:
    ready, _, _ = select.select([0], [], [], 0.2)
    chunk = b""
    if ready:
      try:
        chunk = os.read(0, 1 << 16)
      except OSError:  # A pseudo-terminal whose other side has closed.
        chunk = b""
      if not chunk:
        break
    elif os.getppid() != parent:  # Ended, but a process it started keeps the pipe open.
      break
    if since is None:
      start_at = _HOLD.search(chunk)
      if start_at:
        write(chunk[:start_at.start()])
        held, since = chunk[start_at.start():], time.monotonic()
      else:
        write(chunk)
    else:
      held += chunk
    if since is not None and time.monotonic() - since > _HOLD_SECONDS and not _ABORT.search(held) and \
        not _unfinished_traceback(held) and verdict(held.decode(errors="replace"), process_id, num_processes) is None:
      # Not the start of an abort, nor a report of a lost process: pass it on.
      write(held)
      held, since = b"", None
  line = verdict(held.decode(errors="replace"), process_id, num_processes)
  if line is None or verbose:
    write(held)
  if line is not None:
    write((b"" if last[0] == b"\n" else b"\n") + line.encode() + b"\n")


if __name__ == "__main__":
  try:
    _relay_main(*map(int, sys.argv[1:4]))
  except (BrokenPipeError, KeyboardInterrupt):
    pass
