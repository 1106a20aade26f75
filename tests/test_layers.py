"""The package's imports point down: the data path and the models never reach up to what uses them (a run, the
families, the objectives, the command line, benchmarks, experiments), read from every import statement, also
those inside functions."""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "pretrain"
# What each lower layer must not import: the modules that sit above it.
ABOVE = {
    "data": ("pretrain.run", "pretrain.family", "pretrain.objectives", "pretrain.commands", "pretrain.cli",
             "pretrain.workdir", "pretrain.bench", "pretrain.experiments", "pretrain.hf", "pretrain.train",
             "pretrain.configs"),
    "models": ("pretrain.run", "pretrain.family", "pretrain.objectives", "pretrain.commands", "pretrain.cli",
               "pretrain.workdir", "pretrain.bench", "pretrain.experiments", "pretrain.hf", "pretrain.train",
               "pretrain.data", "pretrain.configs"),
    "train": ("pretrain.run", "pretrain.objectives", "pretrain.commands", "pretrain.cli", "pretrain.bench",
              "pretrain.experiments", "pretrain.configs"),
    "hf": ("pretrain.run", "pretrain.objectives", "pretrain.commands", "pretrain.cli", "pretrain.bench",
           "pretrain.experiments", "pretrain.configs"),
    "parallel": ("pretrain.run", "pretrain.family", "pretrain.objectives", "pretrain.commands", "pretrain.cli",
                 "pretrain.bench", "pretrain.experiments", "pretrain.configs", "pretrain.data", "pretrain.train",
                 "pretrain.models", "pretrain.hf"),
    "objectives": ("pretrain.run", "pretrain.commands", "pretrain.cli", "pretrain.bench", "pretrain.experiments",
                   "pretrain.configs"),
    # The experiments (sweeps among them) run the commands' functions; a command never reaches up to them.
    "commands": ("pretrain.experiments",),
}


def imported_modules(path: pathlib.Path) -> set[str]:
  """Every module an import statement of the file names ('from pretrain import run' names pretrain.run)."""
  names = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      names |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom) and node.module:
      names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
  return names


@pytest.mark.parametrize("layer", ABOVE)
def test_a_layer_imports_nothing_above_it(layer):
  upward = {}
  for path in sorted((PACKAGE / layer).rglob("*.py")):
    found = {name for name in imported_modules(path) if name.startswith(ABOVE[layer])}
    if found:
      upward[str(path.relative_to(PACKAGE))] = sorted(found)
  assert not upward, upward


def test_the_checker_sees_an_upward_import(tmp_path):
  source = tmp_path / "module.py"
  source.write_text("def f():\n  from pretrain import run as run_lib\n  from pretrain.family import CAUSAL_LM\n")
  assert {"pretrain.run", "pretrain.family.CAUSAL_LM"} <= imported_modules(source)
