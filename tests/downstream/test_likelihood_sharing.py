"""Requests that share a forward pass (pretrain/downstream/likelihood.py) score what each request scored alone, in
its own row as the scorer ran them before: lm-eval's multiple choice (one-token choices of one context), choices
that are prefixes of a longer one, repeats, contexts cut to the model's length, on every family lm-eval's
`pretrain` model type runs."""

import jax
import numpy as np
import pytest

from pretrain import run as run_lib
from pretrain.downstream import harness, likelihood
from tests import numerics
from tests.conftest import tiny_config


FAMILIES = {
    "decoder-only": ("clm", ()),
    "prefix-LM": ("prefix_lm_decoder", ()),
    "encoder-decoder": ("span_corruption", ()),
    "mixture of experts": ("clm", ("--config.model.moe_experts=4", "--config.model.moe_top_k=2",
                                   "--config.model.moe_mlp_dim=32")),
}
MAX_LENGTH = 48
CONTEXT = "The value of the object is"
CHOICES = [" returned", " a", " the", " not", " returned to the caller", " returned to", " a"]
LONG = "A method of the class " * 12  # Cut from the left to the model's length, by each request's own length.


def _requests(lm) -> list[tuple[list[int], list[int]]]:
  pairs = [lm._encode_pair(CONTEXT, c) for c in CHOICES]
  # Contexts one word longer than another request's inputs: the same row for a causal model's decoder, not for a
  # prefix-LM's prefix (seen by every position) or an encoder.
  pairs.append(lm._encode_pair(CONTEXT + " returned", " to"))
  pairs += [lm._encode_pair("The name of the class", " is"), lm._encode_pair("The name of the class is", " a")]
  pairs += [lm._encode_pair(LONG, " name"), lm._encode_pair(LONG, " nameless"),
            ([lm.prefix_token_id], lm.tok_encode("Return a list of strings.", add_special_tokens=False))]
  return pairs


def _alone(lm, context, continuation) -> tuple[float, bool]:
  """A request in a row of its own, padded as the scorer pads (the scorer's form before rows were shared)."""
  (row,) = lm._rows(context, continuation)
  batch = {name: np.pad(value, (0, likelihood.padded(len(value)) - len(value)))[None] for name, value in row.items()}
  family = lm.run.family
  with lm.run.activated():
    logp, greedy = jax.device_get(jax.jit(lambda p, b: family.token_logprobs(lm.run.model, p, b))(lm.params, batch))
  return float(logp.sum(dtype=np.float64)), bool(greedy.all())


def _greedy_token(lm, context) -> int:
  (row,) = lm._rows(context, [0])
  family = lm.run.family
  with lm.run.activated():
    logits = family.token_logits(lm.run.model, lm.params, {name: value[None] for name, value in row.items()})
  return int(np.argmax(logits[0, np.flatnonzero(row[likelihood.WEIGHTS])[0]]))


@pytest.mark.slow  # Compiles a model of each family.
@pytest.mark.parametrize("family", FAMILIES)
def test_requests_sharing_rows_score_as_each_alone(family, vocabulary):
  objective, flags = FAMILIES[family]
  run = run_lib.Run.build(tiny_config(f"--config.data.objective={objective}", "--config.data.inputs_length=48",
                                      "--config.data.targets_length=16", "--config.data.seq_len=64", *flags),
                          vocabulary=vocabulary)
  lm = harness.PretrainLM(run=run, params=run.create_state().params, max_length=MAX_LENGTH, batch_size=8)
  requests = _requests(lm)
  # The model's greedy token after the context as one more choice, so is_greedy is checked both ways.
  requests.append((requests[0][0], [_greedy_token(lm, requests[0][0])]))
  reference = [_alone(lm, c, t) for c, t in requests]
  assert reference[-1][1] and not all(g for _, g in reference)
  shared = lm._loglikelihood_tokens([(None, c, t) for c, t in requests], disable_tqdm=True)
  assert [g for _, g in shared] == [g for _, g in reference]
  # Each score is a sum of log-softmaxes over the vocabulary, after the model.
  numerics.assert_close([s for s, _ in shared], [s for s, _ in reference],
                        terms=numerics.transformer_terms(run.model.config, 64) + run.vocab_size)
  # A causal model runs five rows: the context's eight choices and the longer context's one (each one token long
  # or a prefix of the longest), the other two contexts and their longer ones, the long context's two (cut by
  # their own lengths), the empty context's; a prefix-LM and an encoder two more (the longer contexts), and an
  # encoder one fewer (it reads the long context cut to the same length).
  rows = {"prefix-LM": 7, "encoder-decoder": 6}.get(family, 5)
  assert lm.scorer.rows_run == rows, lm.scorer.rows_run
