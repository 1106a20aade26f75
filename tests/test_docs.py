"""The README and the documentation site: every shell command in them parses as written (subcommand, flags,
config files and config keys), the site builds with `mkdocs build --strict` (a broken link or anchor fails), and
the README stays short.

The commands' behaviour is tested where each feature is (a CLI run per subcommand in the other test files);
this file catches the pages drifting from the code: a renamed flag, a moved tool, an unknown config key.
"""

import argparse
import importlib
import os
import re
import shlex
import subprocess
import sys

import pytest

from pretrain import cli
from pretrain.system.errors import UserError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


PAGES = ["README.md", *sorted(os.path.relpath(os.path.join(root, name), REPO)
                              for root, _, names in os.walk(os.path.join(REPO, "docs")) for name in names
                              if name.endswith(".md"))]


SHELL = ("", "sh", "bash", "shell", "console")  # The ``` blocks of commands (```text shows output, ```python code).


def _blocks(page: str) -> list[tuple[str, str, str]]:
  """(language, text, the prose line before it) of a page's code blocks: ``` blocks, and blocks indented by 4
  spaces after a blank line (language "")."""
  blocks, block, language, before, previous = [], None, "", "", ""
  indented = None
  with open(os.path.join(REPO, page)) as f:
    lines = f.read().splitlines(keepends=True) + ["\n"]
  for line in lines:
    if indented is not None and not (line.startswith("    ") or not line.strip()):
      blocks.append(("", "".join(indented), before))
      indented = None
    if block is None and line.startswith("```"):
      block, language = [], line[3:].strip()
    elif block is not None and line.startswith("```"):
      blocks.append((language, "".join(block), before))
      block = None
    elif block is not None:
      block.append(line)
    elif indented is not None:
      indented.append(line[4:])
    elif line.startswith("    ") and not previous.strip():
      indented = [line[4:]]
    if block is None and indented is None and line.strip() and not line.startswith("```"):
      before = line
    previous = line
  return blocks


def page_commands(page: str) -> list[list[str]]:
  """Shell commands of a page's code blocks, continuations joined, [optional] parts dropped, `.venv/bin/` taken
  off the program (`pretrain`, `python`)."""
  commands = []
  for language, block, _ in _blocks(page):
    if language not in SHELL:
      continue
    for line in block.replace("\\\n", " ").splitlines():
      line = re.sub(r"\[[^\]]*\]", "", line.split("#")[0]).replace("...", "").replace("$i", "0")
      words = shlex.split(line)
      while words and re.match(r"^[A-Z_]+=", words[0]):  # Environment variables before the command.
        words.pop(0)
      if words:
        commands.append([words[0].removeprefix(".venv/bin/"), *words[1:]])
  return commands


def page_files(page: str) -> dict[str, str]:
  """The files a page writes out for its commands: each ```python block whose prose ends naming it (in `NAME.py`:)."""
  return {m.group(1): block for language, block, before in _blocks(page) if language == "python"
          for m in [re.search(r"`([\w./-]+\.py)`:\s*$", before)] if m}


PAGE_COMMANDS = [(page, words) for page in PAGES for words in page_commands(page)]
COMMANDS = [words for _, words in PAGE_COMMANDS]


class Parsed(Exception):
  """Raised in place of running a command once its flags and config have been resolved."""


def test_the_pages_have_commands_of_every_kind():
  programs = {c[0] if c[0] != "pretrain" else f"pretrain {c[1]}" for c in COMMANDS}
  assert {"make", "pretrain train", "pretrain eval", "pretrain generate", "pretrain export", "pretrain launch",
          "pretrain inspect-task", "pretrain train-tokenizer", "pretrain estimate-memory", "pretrain bench"} <= programs


@pytest.mark.parametrize("page, words", [(p, c) for p, c in PAGE_COMMANDS if c[0] == "pretrain"],
                         ids=[shlex.join(c) for _, c in PAGE_COMMANDS if c[0] == "pretrain"])
def test_pretrain_command_parses(page, words, monkeypatch, tmp_path):
  name, argv = words[1], words[2:]
  assert name in cli.SUBCOMMANDS
  original_parse_args, original_command_line = argparse.ArgumentParser.parse_args, cli.parse_command_line

  def parse_args(self, args=None, namespace=None):
    original_parse_args(self, args, namespace)
    raise Parsed()

  def parse_command_line(parser, args):
    original_command_line(parser, args)
    raise Parsed()

  monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_args)
  monkeypatch.setattr(cli, "parse_command_line", parse_command_line)
  monkeypatch.setattr(cli, "run_workdir", str)  # The runs the README reads are the reader's, made by its commands.
  monkeypatch.chdir(REPO)
  if page_files(page):  # The files the page writes out for its commands (an objective's FILE.py), beside configs/.
    for file_name, text in page_files(page).items():
      (tmp_path / file_name).write_text(text)
    os.symlink(os.path.join(REPO, "configs"), tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
  module = importlib.import_module(cli.SUBCOMMANDS[name][0])
  try:
    module.main.__wrapped__(argv, prog=f"pretrain {name}")  # Unwrapped: a UserError fails the test with its text.
  except Parsed:
    return
  except SystemExit as e:
    pytest.fail(f"{shlex.join(words)}: exits {e.code} while parsing (see the captured stderr)")
  except UserError as e:
    pytest.fail(f"{shlex.join(words)}: {e}")
  pytest.fail(f"{shlex.join(words)}: parsed no flags")


def _tool_flags() -> dict[tuple[str, ...], set[str]]:
  """{a tool's command (python tools/X.py, or python -m MODULE [SUBCOMMAND]): the flags the pages give it}: each
  tool's --help is read once, however many pages show it (a start takes seconds)."""
  flags = {}
  for words in (c for c in COMMANDS if c[0] == "python"):
    if words[1] == "-m":  # A module's command line (python -m MODULE [SUBCOMMAND] --flags).
      command = ("-m", words[2], *(words[3:4] if len(words) > 3 and not words[3].startswith("-") else []))
      given = words[3:]
    else:
      command, given = (words[1],), words[2:]
    flags.setdefault(command, set()).update(w.split("=")[0] for w in given if w.startswith("--"))
  return flags


TOOL_FLAGS = _tool_flags()


@pytest.mark.parametrize("command", TOOL_FLAGS, ids=" ".join)
def test_tool_command_exists_and_takes_its_flags(command):
  if command[0] != "-m":
    assert command[0].startswith("tools/") and os.path.exists(os.path.join(REPO, command[0])), command[0]
  shown = subprocess.run([sys.executable, *command, "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
  assert shown.returncode == 0, shown.stderr
  for flag in TOOL_FLAGS[command]:
    assert flag in shown.stdout or flag.startswith("--config."), f"python {' '.join(command)} has no flag {flag}"


def test_make_targets_exist():
  with open(os.path.join(REPO, "Makefile")) as f:
    targets = set(re.findall(r"^([a-z-]+):", f.read(), flags=re.M))
  for words in (c for c in COMMANDS if c[0] == "make"):
    assert words[1] in targets, shlex.join(words)


def test_the_readme_says_where_the_data_cache_is():
  """A user sharing a machine or a cluster needs to know where the prepared data goes, and how to move it."""
  with open(os.path.join(REPO, "README.md")) as f:
    readme = f.read()
  assert "--config.data.cache_dir=DIR" in readme and "$PRETRAIN_CACHE" in readme and "~/.cache/pretrain" in readme


def test_the_readme_is_short_and_the_site_builds_strictly(tmp_path):
  with open(os.path.join(REPO, "README.md")) as f:
    assert len(f.readlines()) < 250
  built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
  assert built.returncode == 0, built.stderr
  site = tmp_path / "site"
  assert (site / "guide" / "evaluation.html").exists() and 'href="extra.css"' in (site / "index.html").read_text()
  # The site opened from disk (file://) too: every link within it names a page or file, never a directory (which a
  # browser shows as a listing). Not 404.html: a server's, its links absolute to work at any depth.
  for page in set(site.rglob("*.html")) - {site / "404.html"}:
    for link in re.findall(r'(?:href|src)="([^"#?]*)', page.read_text()):
      if link and ":" not in link and not link.startswith("//"):
        assert (page.parent / link).is_file(), f"{page.relative_to(site)} links to {link}"


def test_a_page_of_results_names_its_data_and_says_so_at_its_top_when_the_data_has_changed():
  """Every page with a Machine: line (results measured on it) names the data its runs read; where that is an
  older version of the bundled corpus than today's, the page opens with a "Not re-run since" notice. A new corpus
  version fails this test until each page is re-run or marked."""
  from pretrain.data import corpus  # pylint: disable=g-import-not-at-top
  today = str(corpus.PretrainCorpus.VERSION)
  checked = 0
  for page in PAGES:
    with open(os.path.join(REPO, page)) as f:
      text = f.read()
    if not re.search(r"^Machine:", text, re.M):
      continue
    checked += 1
    data = re.search(r"Data: the (Penn Treebank|bundled corpus, version (\d+\.\d+\.\d+))", " ".join(text.split()))
    assert data, f"{page}: no 'Data: ...' line (pretrain/experiments/runs.py data_line)"
    if data.group(2) and data.group(2) != today:
      top = " ".join(text.split("\n\n")[1].split())
      assert top.startswith("**Not re-run since") and f"predate corpus {today}" in top, page
  assert checked >= 12


@pytest.mark.parametrize("page", ["README.md", "docs/guide/commands.md"])
def test_the_command_tables_list_every_subcommand(page):
  """Each table of commands has a row per subcommand (`pretrain NAME ...`), as the CLI's overview does."""
  with open(os.path.join(REPO, page)) as f:
    listed = {line.split("`")[1].split()[1] for line in f if line.startswith("| `pretrain ")}
  assert set(cli.SUBCOMMANDS) <= listed, sorted(set(cli.SUBCOMMANDS) - listed)
