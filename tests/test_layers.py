"""The package's imports point down: each layer (LAYERS) imports only from those below it, read from every import
statement, also those inside functions: the plumbing and the models never reach up to the data path, the data
path never to a run, a run never to the command line."""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "pretrain"
# The layers from the bottom up, by package (or top-level module): a module imports from its own layer and those
# below, never from above. The process's plumbing first, the command line's experiments last.
LAYERS = (
    ("system",),                                 # errors, console, files, the TensorFlow loader, the cache
    ("config", "vocab", "models", "parallel"),   # the config's schema; vocabularies; Flax modules; the mesh
    ("data",),                                   # sources, token stores, pipelines, curricula
    ("train",),                                  # optimizer, state, steps, loop, checkpoints, metrics
    ("families",),                               # what sits between an objective's examples and a model
    ("objectives",),
    ("configs",),                                # the config zoo (configs/), which names objectives
    ("hf", "workdir"),
    ("run",),                                    # the one run setup
    ("downstream",),                             # evaluation of a run: probes, zero-shot tasks, lm-eval
    ("training",),                               # a config trained in a workdir (with lm-eval's tasks in the loop)
    ("cli",),                                    # the command line's parsing (and its entry point)
    ("bench",),
    ("commands",),
    ("experiments",),                            # comparisons and sweeps: they run the commands' functions
    ("__main__",),
)
LEVEL = {name: level for level, names in enumerate(LAYERS) for name in names}


def layer_of(module: str) -> str | None:
  """The layer name of a dotted module of the package ('pretrain.data.sources' -> 'data')."""
  parts = module.split(".")
  return parts[1] if parts[0] == "pretrain" and len(parts) > 1 and parts[1] in LEVEL else None


def imported_modules(path: pathlib.Path) -> set[str]:
  """Every module an import statement of the file names ('from pretrain import run' names pretrain.run)."""
  names = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      names |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom) and node.module:
      names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
  return names


def test_every_package_is_in_a_layer():
  names = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
           if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
  assert names <= set(LEVEL), sorted(names - set(LEVEL))


@pytest.mark.parametrize("layer", [name for names in LAYERS for name in names])
def test_a_layer_imports_nothing_above_it(layer):
  path = PACKAGE.parent / "configs" if layer == "configs" else PACKAGE / layer  # The zoo is pretrain.configs.
  paths = sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]
  upward = {}
  for source in paths:
    found = {name for name in imported_modules(source)
             if layer_of(name) is not None and LEVEL[layer_of(name)] > LEVEL[layer]}
    if found:
      upward[str(source.relative_to(PACKAGE))] = sorted(found)
  assert not upward, upward


def test_the_checker_sees_an_upward_import(tmp_path):
  source = tmp_path / "module.py"
  source.write_text("def f():\n  from pretrain import run as run_lib\n  from pretrain.families import CAUSAL_LM\n")
  assert {"pretrain.run", "pretrain.families.CAUSAL_LM"} <= imported_modules(source)


def test_an_import_inside_a_function_says_why():
  """An import belongs at the top of its module; one inside a function (start-up time, an optional dependency)
  carries its reason in parentheses on its line or on the `disable-next` line above (docs/guide/layout.md)."""
  unexplained = []
  for path in sorted(PACKAGE.rglob("*.py")):
    lines = path.read_text().split("\n")
    for fn in ast.walk(ast.parse("\n".join(lines))):
      if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for node in ast.walk(fn):
          if isinstance(node, (ast.Import, ast.ImportFrom)):
            said = lines[node.end_lineno - 1].partition("#")[2] + lines[node.lineno - 2].partition("#")[2]
            if "(" not in said:
              unexplained.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
  assert not unexplained, unexplained
