"""Generates a continuation of a prompt with the latest checkpoint of a run.

  pretrain generate --workdir=runs/quickstart --prompt="Return the" \
      [--max_new_tokens=40] [--temperature=0.8 --top_k=40 --top_p=0.95] [--seed=0]

Greedy unless a sampling flag is given. A decoder-only model continues the
prompt (a prefix-LM model reads it bidirectionally); an encoder-decoder model
reads the prompt followed by <extra_id_0> and writes what fills that span.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pretrain.errors import UserError, exit_on_user_error  # pylint: disable=g-import-not-at-top


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain generate") -> None:
  parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--workdir", required=True, help="a run of pretrain train (its latest checkpoint)")
  parser.add_argument("--prompt", required=True, help="text to continue (encoder-decoder: to fill a span after)")
  parser.add_argument("--max_new_tokens", type=int, default=40, help="tokens to generate")
  parser.add_argument("--temperature", type=float, help="sampling temperature (default: greedy)")
  parser.add_argument("--top_k", type=int, default=0, help="sample among the k most likely tokens")
  parser.add_argument("--top_p", type=float, default=1.0, help="sample among the most likely tokens of mass p")
  parser.add_argument("--seed", type=int, default=0, help="sampling seed")
  args = parser.parse_args(argv)
  sampling = args.temperature is not None or args.top_k or args.top_p < 1.0
  temperature = (1.0 if args.temperature is None else args.temperature) if sampling else 0.0
  if args.max_new_tokens < 1:
    raise UserError("--max_new_tokens must be at least 1")

  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from pretrain import models  # pylint: disable=g-import-not-at-top
  from pretrain.data import vocab  # pylint: disable=g-import-not-at-top
  from pretrain.models import decoding  # pylint: disable=g-import-not-at-top
  from pretrain.train import restore  # pylint: disable=g-import-not-at-top

  run = restore.load(args.workdir)
  if isinstance(run.model, models.EncoderOnly):
    raise UserError(f"{args.workdir!r} holds a masked language model (objective mlm), which does not generate text")
  prompt = run.vocabulary.encode(args.prompt)
  rng, valid = jax.random.key(args.seed), run.vocabulary.vocab_size
  sampling_args = dict(temperature=temperature, top_k=args.top_k, top_p=args.top_p, num_valid=valid)
  if isinstance(run.model, models.EncoderDecoder):
    inputs = prompt + [vocab.sentinel_id(run.vocabulary, 0), vocab.EOS_ID]
    if len(inputs) > run.lengths["inputs"] or args.max_new_tokens > run.lengths["targets"]:
      raise UserError(f"the prompt takes {len(inputs)} input tokens and {args.max_new_tokens} new tokens are asked; "
                      f"the model was trained on at most {run.lengths['inputs']} and {run.lengths['targets']}: "
                      "shorten the prompt or --max_new_tokens")
    new = decoding.generate_encoder_decoder(run.model, run.params, jnp.asarray([inputs]), args.max_new_tokens, rng,
                                            **sampling_args)
  else:
    limit = sum(run.lengths.values())
    if len(prompt) + 1 + args.max_new_tokens > limit:
      raise UserError(f"the prompt has {len(prompt)} tokens and {args.max_new_tokens} new tokens are asked, more "
                      f"than the {limit} positions the model was trained on; shorten the prompt or --max_new_tokens")
    new = decoding.generate(run.model, run.params, jnp.asarray([prompt]), args.max_new_tokens, rng,
                            prefix_lm=run.objective.converter == "prefix_lm", **sampling_args)
  tokens = jax.device_get(new)[0].tolist()
  if vocab.EOS_ID in tokens:
    tokens = tokens[:tokens.index(vocab.EOS_ID)]
  print(run.vocabulary.decode(tokens))


if __name__ == "__main__":
  main(sys.argv[1:])
