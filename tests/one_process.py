"""Many `pretrain` command lines run in turn in one Python process, each with the stdout, stderr and exit status
`python -m pretrain` would give it: one start-up of Python, TensorFlow and JAX (most of a short command's time)
instead of one per command.

Each command is `pretrain.cli.main(argv)`, as the command line calls it; its output goes to its own files through
file descriptors 1 and 2, so that native logs (XLA's, TensorFlow's) land there too, and an exception or exit ends
that command only, with the status the command line would give (a traceback and 1 for an uncaught exception).

    python -m tests.one_process ROOT   # ROOT/commands.json: a list of argv lists; writes ROOT/N.{stdout,stderr,exit}
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import traceback


def command(argv: list[str], base: str) -> int:
  """Runs `pretrain ARGV` in this process, its stdout and stderr to BASE.stdout and BASE.stderr (file descriptors
  1 and 2, and Python's sys.stdout and sys.stderr, which a test runner may have replaced); its exit status."""
  from pretrain import cli  # pylint: disable=g-import-not-at-top  (not where only run() is used)
  saved_fds, saved_streams = (os.dup(1), os.dup(2)), (sys.stdout, sys.stderr)
  with open(base + ".stdout", "w") as out, open(base + ".stderr", "w") as err:
    for stream in saved_streams:
      stream.flush()
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)
    try:
      code = cli.main(argv)
    except SystemExit as e:
      code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
      if not isinstance(e.code, (int, type(None))):
        print(e.code, file=sys.stderr)
    except BaseException:  # pylint: disable=broad-except  (as an uncaught exception ends the command line)
      traceback.print_exc()
      code = 1
    finally:
      sys.stdout.close()
      sys.stderr.close()
      sys.stdout, sys.stderr = saved_streams
      for fd, saved in zip((1, 2), saved_fds):
        os.dup2(saved, fd)
        os.close(saved)
  return code


def in_this_process(argv: list[str], scratch: str | None = None) -> subprocess.CompletedProcess:
  """`pretrain ARGV` run here (command), as subprocess.run(..., capture_output=True, text=True) reports it; its
  output passes through files in `scratch` (the system's temporary directory by default)."""
  fd, base = tempfile.mkstemp(dir=scratch)
  os.close(fd)
  code = command(argv, base)
  outputs = [pathlib.Path(base + suffix).read_text() for suffix in (".stdout", ".stderr")]
  for path in (base, base + ".stdout", base + ".stderr"):
    os.remove(path)
  return subprocess.CompletedProcess(["pretrain", *argv], code, *outputs)


def run(commands: list[list[str]], root: pathlib.Path, env: dict, cwd: str, timeout: float = 1800) -> list[tuple]:
  """(exit status, stdout, stderr) of each command, run in turn in one process under `root`; a command the
  process did not finish (it died, or hung past `timeout`) has status None and the process's own output."""
  root.mkdir(parents=True, exist_ok=True)
  (root / "commands.json").write_text(json.dumps(commands))
  try:
    process = subprocess.run([sys.executable, "-m", "tests.one_process", str(root)], cwd=cwd, env=env,
                             capture_output=True, text=True, timeout=timeout)
    said = f"\nthe process exited {process.returncode}:\n{process.stderr[-3000:]}"
  except subprocess.TimeoutExpired as e:
    said = f"\nthe process was stopped after {timeout} s:\n{(e.stderr or b'')[-3000:]!r}"
  results = []
  for i in range(len(commands)):
    out, err, status = (root / f"{i}.{suffix}" for suffix in ("stdout", "stderr", "exit"))
    text = out.read_text() if out.exists() else ""
    if status.exists():
      results.append((int(status.read_text()), text, err.read_text()))
    else:  # The process died or hung before or during this command: its own output says why.
      results.append((None, text, (err.read_text() if err.exists() else "") + said))
  return results


if __name__ == "__main__":
  _root = sys.argv[1]
  with open(os.path.join(_root, "commands.json")) as _f:
    _commands = json.load(_f)
  for _i, _argv in enumerate(_commands):
    _base = os.path.join(_root, str(_i))
    _code = command(_argv, _base)
    with open(_base + ".exit", "w") as _f:
      _f.write(str(_code))
