"""gin files for run configs, as T5X users write them: `SECTION.FIELD = value`
bindings, macros (`DIM = 512`, `model.d_model = %DIM`) and `include`s,
applied over the --config file (the quickstart by default). A gin run and its
ml_collections twin resolve to the same ConfigDict and drive the same code.
"""

import os
import tokenize

from gin import config_parser

from pretrain import config as config_lib
from pretrain.system.errors import UserError


class _Delegate(config_parser.ParserDelegate):
  def configurable_reference(self, scoped_name, evaluate):
    raise UserError(f"gin reference @{scoped_name} is not supported: run configs bind plain values")

  def macro(self, macro_name):
    return _Macro(macro_name)


class _Macro:
  def __init__(self, name):
    self.name = name


def _statements(text: str, where: str):
  try:
    return list(config_parser.ConfigParser(text, _Delegate()))
  except SyntaxError as e:
    raise UserError(f"{where}: gin syntax error at line {e.lineno}: {e.msg}") from None
  except tokenize.TokenError as e:  # An unclosed bracket, say.
    raise UserError(f"{where}: gin syntax error: {e.args[0]}") from None


class _Bindings:
  """What gin files and --gin flags say, in order: field bindings, and macros resolved only once everything is
  read, as gin resolves them (the last definition of a macro wins wherever it is used)."""

  def __init__(self, search_paths=()):
    self.search_paths = tuple(search_paths)  # Where an include's relative path is looked for, after its file's folder.
    self.fields: list[tuple[str, object, str]] = []  # (SECTION.FIELD, value, where)
    self.macros: dict[str, tuple[object, str]] = {}  # NAME -> (value, where)

  def read(self, statements, where: str, directory: str, including: tuple = ()) -> None:
    for statement in statements:
      if isinstance(statement, config_parser.IncludeStatement):
        self.read_file(self.included(statement.filename, where, directory), including)
        continue
      if not isinstance(statement, config_parser.BindingStatement):
        raise UserError(f"{where}: line {statement.location.line_num}: only bindings, macros and includes are "
                        "supported in run configs")
      line = f"{where}, line {statement.location.line_num}"
      if statement.scope:  # gin would bind it only inside that scope; a run config has one value per field.
        name = f"{statement.selector}.{statement.arg_name}" if statement.arg_name else statement.selector
        raise UserError(f"{line}: the scoped binding {statement.scope}/{name} is not supported: a run config has "
                        f"one value per field; bind {name} without the scope")
      if statement.arg_name:
        self.fields.append((f"{statement.selector}.{statement.arg_name}", statement.value, line))
      else:  # NAME = value defines a macro.
        self.macros[statement.selector] = (statement.value, line)

  def included(self, name: str, where: str, directory: str) -> str:
    """The file an `include` names: a relative path from the including file's folder, else (as gin and T5X's
    --gin_search_paths look for it) from the current directory or a search path."""
    places = [directory, ".", *self.search_paths]
    found = next((os.path.join(place, name) for place in places if os.path.isfile(os.path.join(place, name))), None)
    if found is None:
      raise UserError(f"{where}: the included gin file {name!r} is in none of {', '.join(map(repr, places))}",
                      fix="give its path from the including file's folder or the current directory, or add its "
                          "folder with --gin_search_paths")
    return found

  def read_file(self, path: str, including: tuple = ()) -> None:
    """A gin file's statements; `including`: the files whose includes led here (a cycle is refused)."""
    if not os.path.isfile(path):
      raise UserError(f"gin file {path!r} does not exist")
    if os.path.realpath(path) in including:
      chain = " -> ".join([*including, os.path.realpath(path)])
      raise UserError(f"gin files include each other ({chain}); remove one of the includes")
    with open(path) as f:
      text = f.read()
    self.read(_statements(text, path), path, os.path.dirname(path), (*including, os.path.realpath(path)))

  def resolve(self, value, where: str, used: set, seen: tuple = ()):
    """`value` with every %MACRO in it (inside tuples, lists and dicts too) replaced by the macro's value; adds
    the macros it used to `used`."""
    if isinstance(value, _Macro):
      if value.name not in self.macros:
        raise UserError(f"{where}: macro %{value.name} is not defined")
      if value.name in seen:
        raise UserError(f"{where}: macro %{value.name} is defined by itself ({' -> '.join((*seen, value.name))})")
      used.add(value.name)
      macro_value, macro_where = self.macros[value.name]
      return self.resolve(macro_value, macro_where, used, (*seen, value.name))
    if isinstance(value, (tuple, list)):
      return type(value)(self.resolve(v, where, used, seen) for v in value)
    if isinstance(value, dict):
      return {self.resolve(k, where, used, seen): self.resolve(v, where, used, seen) for k, v in value.items()}
    return value


def apply(cfg, files: list[str], flags: list[str], search_paths=()) -> None:
  """Sets the fields that gin `files`, then --gin.KEY=VALUE `flags` (their text after --gin.), bind in `cfg`: the
  later binding of a field wins, and a macro has its last definition wherever it is used, so a file or flag can
  change a macro that an included file uses. A flag that defines a macro no binding uses is refused (a mistyped
  SECTION.FIELD would otherwise change nothing)."""
  bindings = _Bindings(search_paths)
  for path in files:
    bindings.read_file(path)
  for text in flags:
    key, equals, value = text.partition("=")
    if not equals:
      raise UserError(f"--gin.{text} has no value; write --gin.{text}=VALUE")
    try:
      statements = list(config_parser.ConfigParser(f"{key} = {value}", _Delegate()))
    except (SyntaxError, tokenize.TokenError):
      statements = _statements(f"{key} = {value!r}", f"--gin.{text}")
    bindings.read(statements, f"--gin.{text}", ".")
  used = set()
  values = [(key, bindings.resolve(value, where, used), where) for key, value, where in bindings.fields]
  for name, (_, where) in bindings.macros.items():
    if where.startswith("--gin.") and name not in used:
      raise UserError(f"{where.rsplit(', line', 1)[0]} defines the macro {name}, which no binding uses; bind a "
                      "field as --gin.SECTION.FIELD=VALUE")
  for key, value, where in values:
    config_lib.set_value(cfg, key, value, f"gin binding {key} ({where})")
