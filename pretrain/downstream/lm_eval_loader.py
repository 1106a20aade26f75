"""lm-evaluation-harness's side of the project (pretrain.downstream.harness), loaded only when a command or a
run asks for its tasks: it needs the eval extra."""

from pretrain.system.errors import UserError


def load():
  """pretrain.downstream.harness, which needs lm-evaluation-harness (the eval extra)."""
  try:
    from pretrain.downstream import harness  # pylint: disable=g-import-not-at-top  (lm-eval and JAX)
  except ImportError as e:
    if "lm_eval" not in str(e):
      raise
    raise UserError("lm-evaluation-harness is not installed; install the eval extra: pip install -e '.[eval]'") \
        from None
  return harness
