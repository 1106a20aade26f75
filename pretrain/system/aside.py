"""Files set aside: a workdir's file that cannot be what the run wrote there (cut short, edited, a directory in its
place, another run's) is renamed beside itself, never deleted, with one line saying so, and the run goes on
without it. Only a command that writes the workdir (training) moves anything; the commands that read a run name
the problem and leave the file where it is."""

import datetime
import uuid

from pretrain.system import files
from pretrain.system.console import log


def name(path: str, tag: str = "damaged") -> str:
  """Where `path` goes aside: PATH.TAG-TIME (the time says when; a few random letters keep two apart)."""
  return f"{path}.{tag}-{datetime.datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:4]}"


def move(path: str, problem: str, then: str, tag: str = "damaged") -> str:
  """Renames `path` aside and says so in one line: 'warning: PATH PROBLEM; moved aside to ASIDE: THEN'."""
  aside = name(path, tag)
  files.rename(path, aside)
  log(f"warning: {path} {problem}; moved aside to {aside}: {then}")
  return aside
