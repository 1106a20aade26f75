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


def _apply(cfg, statements, macros: dict, where: str, directory: str, including: tuple = ()) -> None:
  for statement in statements:
    if isinstance(statement, config_parser.IncludeStatement):
      apply_file(cfg, os.path.join(directory, statement.filename), macros, including)
      continue
    if not isinstance(statement, config_parser.BindingStatement):
      raise UserError(f"{where}: line {statement.location.line_num}: only bindings, macros and includes are "
                      "supported in run configs")
    value = statement.value
    if isinstance(value, _Macro):
      if value.name not in macros:
        raise UserError(f"{where}: line {statement.location.line_num}: macro %{value.name} is not defined")
      value = macros[value.name]
    if not statement.arg_name:  # NAME = value defines a macro.
      macros[statement.selector] = value
      continue
    key = f"{statement.selector}.{statement.arg_name}"
    config_lib.set_value(cfg, key, value, f"gin binding {key} ({where}, line {statement.location.line_num})")


def apply_file(cfg, path: str, macros: dict | None = None, including: tuple = ()) -> None:
  """Applies a gin file's bindings; `including`: the files whose includes led here (a cycle is refused)."""
  if not os.path.isfile(path):
    raise UserError(f"gin file {path!r} does not exist")
  if os.path.realpath(path) in including:
    chain = " -> ".join([*including, os.path.realpath(path)])
    raise UserError(f"gin files include each other ({chain}); remove one of the includes")
  with open(path) as f:
    text = f.read()
  _apply(cfg, _statements(text, path), {} if macros is None else macros, path, os.path.dirname(path),
         (*including, os.path.realpath(path)))


def apply_binding(cfg, text: str) -> None:
  """One --gin.KEY=VALUE flag; VALUE is a gin (Python) literal, or else a string."""
  key, _, value = text.partition("=")
  try:
    statements = list(config_parser.ConfigParser(f"{key} = {value}", _Delegate()))
  except (SyntaxError, tokenize.TokenError):
    statements = _statements(f"{key} = {value!r}", f"--gin.{text}")
  _apply(cfg, statements, {}, f"--gin.{text}", ".")
