"""Numbers given as a command's flags (--temperature, --top_p, --steps, ...), checked as they are parsed, as a
config field's are (schema.Valid): a value that is not a number, not finite (nan, inf) or out of range is one
`error:` line naming the flag, before any work.

  parser.add_argument("--top_p", type=flags.number(Valid(lambda v: 0 < v <= 1, "a mass in (0, 1]")))
  parser.add_argument("--steps", type=flags.at_least(1))
"""

import argparse
import math

from pretrain.config.schema import MAX_SEED, Valid


def number(valid: Valid | None = None, kind: type = float):
  """An argparse type: a finite `kind` (float or int) of the values `valid` says; its `what` completes
  'give ...' (e.g. 'at least 0 (0: greedy)')."""

  def parse(text: str):
    try:
      value = kind(text)
    except ValueError:
      raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
    if not math.isfinite(value):
      raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    if valid is not None and not valid.test(value):
      raise argparse.ArgumentTypeError(f"give {valid.what}, not {value}")
    return value

  return parse


def at_least(minimum: int, maximum: int | None = None):
  """An integer of at least `minimum` (and at most `maximum`)."""
  what = f"at least {minimum}" + (f" and at most {maximum}" if maximum is not None else "")
  return number(Valid(lambda v: v >= minimum and (maximum is None or v <= maximum), what), int)


def seed(text: str) -> int:
  """A seed, as JAX and TensorFlow take one: a signed 64-bit integer of at least 0."""
  return at_least(0, MAX_SEED)(text)
