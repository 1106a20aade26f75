"""The run-config flags every command takes: --config=FILE, --gin_file=FILE,
--gin.KEY=VALUE and --config.KEY=VALUE, applied in that order.

A module of its own so that pretrain.config, which the gin front-end builds
on, imports nothing from it.
"""

from pretrain import config as config_lib
from pretrain import gin_config
from pretrain.errors import UserError


def parse_command_line(parser, argv: list[str]):
  """Parses a tool's flags plus `--config=FILE`, gin files and `KEY=VALUE` overrides.

  Returns (args, config), the config's values checked (config.validate); anything left over is an error.
  """
  parser.add_argument("--config", default="configs/quickstart.py", help="ml_collections config file")
  parser.add_argument("--gin_file", action="append", default=[],
                      help="gin file of SECTION.FIELD = value bindings over --config (repeatable)")
  parser.add_argument("--verbose", action="store_true", help="show the traceback of a config file that raises")
  parser.epilog = ("Any config field can be set with --config.SECTION.FIELD=VALUE, e.g. --config.train.steps=100, "
                   "or --gin.SECTION.FIELD=VALUE.")
  args, rest = parser.parse_known_args(argv)
  cfg = config_lib.load_config_file(args.config, args.verbose)
  for path in args.gin_file:
    gin_config.apply_file(cfg, path)
  for arg in [a for a in rest if a.startswith("--gin.")]:
    gin_config.apply_binding(cfg, arg[len("--gin."):])
  rest = config_lib.apply_overrides(cfg, [a for a in rest if not a.startswith("--gin.")])
  if rest:
    raise UserError(f"unknown arguments {rest}; see --help for the flags, and set config fields "
                    "with --config.KEY=VALUE")
  config_lib.validate(cfg)
  return args, cfg
