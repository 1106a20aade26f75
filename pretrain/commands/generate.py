"""Generates a continuation of a prompt with the latest checkpoint of a run.

  pretrain generate --workdir=runs/quickstart --prompt="Return the" \
      [--max_new_tokens=40] [--temperature=0.8 --top_k=40 --top_p=0.95] [--seed=0] [--mode=TOKEN] [--dropless]

Greedy unless a sampling flag is given. The prompt's ids are the run's
vocabulary's encoding of it. A decoder-only model continues the prompt (a
prefix-LM model reads it bidirectionally), and the text printed is what the
continuation adds to the prompt's. An encoder-decoder model reads the prompt
followed by <extra_id_0> and writes what fills that span; its text is printed as
written, sentinels included ("<extra_id_0> ... <extra_id_1>"), where lm-eval and
transformers' decode(skip_special_tokens=True) leave them out.

--mode puts a UL2 run's mode token before the prompt, as its examples begin
(lm-eval's --mode reads contexts alike): [S2S], the S-denoiser's, is UL2's mode
for continuing text. An encoder-decoder then reads the mode token, the prompt
and EOS, and its decoder continues the prompt (the S-denoiser's form) instead of
filling a span after it.
"""

import sys

from pretrain import cli
from pretrain.config import Valid
from pretrain.system.errors import UserError, exit_on_user_error


DEFAULT_NEW_TOKENS = 40


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain generate") -> None:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--workdir", required=True, type=cli.run_workdir,
                      help="a run of pretrain train (its latest checkpoint)")
  parser.add_argument("--prompt", required=True, help="text to continue (encoder-decoder: to fill a span after)")
  parser.add_argument("--max_new_tokens", type=cli.at_least(1),
                      help=f"tokens to generate (default: {DEFAULT_NEW_TOKENS}, or as many as the run's rows leave)")
  parser.add_argument("--temperature", type=cli.number(Valid(lambda v: v >= 0, "at least 0 (0: greedy)")),
                      help="sampling temperature (default: greedy)")
  parser.add_argument("--top_k", type=cli.at_least(0), default=0, help="sample among the k most likely tokens")
  parser.add_argument("--top_p", type=cli.number(Valid(lambda v: 0 < v <= 1, "a mass in (0, 1], e.g. 0.95 (1 keeps "
                                                                              "every token)")),
                      default=1.0, help="sample among the most likely tokens of mass p")
  parser.add_argument("--seed", type=cli.seed, default=0, help="sampling seed")
  parser.add_argument("--mode", help="a UL2 run's mode token before the prompt, e.g. [S2S] (an encoder-decoder then "
                                     "continues the prompt rather than filling a span after it)")
  parser.add_argument("--dropless", action="store_true", help="a mixture of experts trained with capacity dispatch "
                                                              "routes every token, as its Hugging Face export does")
  args = parser.parse_args(argv)
  sampling = args.temperature is not None or args.top_k or args.top_p < 1.0
  temperature = (1.0 if args.temperature is None else args.temperature) if sampling else 0.0
  if not args.prompt:
    raise UserError("--prompt is empty; give the text to continue")

  import jax  # pylint: disable=g-import-not-at-top  (not for --help)
  # pylint: disable-next=g-import-not-at-top  (not for --help)
  from pretrain import objectives, run as run_lib, vocab as text_vocab

  objectives.check_mode(run_lib.saved_config(args.workdir), args.mode, "--mode")  # Before the seconds of loading.
  run, params, _ = run_lib.load(args.workdir, pipeline=False, dropless=args.dropless)
  mode = [text_vocab.single_piece_id(run.vocabulary, args.mode)] if args.mode else []
  prompt = [*mode, *run.vocabulary.encode(args.prompt)]
  new = args.max_new_tokens or max(1, min(DEFAULT_NEW_TOKENS, run.family.room(len(prompt), run.task_lengths)))
  run.family.check_prompt(len(prompt), new, run.task_lengths, span=not mode)
  [tokens] = run.family.generate(run.model, params, [prompt], new, jax.random.key(args.seed),
                                 sentinel=None if mode else text_vocab.sentinel_id(run.vocabulary, 0),
                                 temperature=temperature,
                                 top_k=args.top_k, top_p=args.top_p, num_valid=run.vocabulary.vocab_size)
  print(run.family.generated_text(run.vocabulary, prompt, tokens))


if __name__ == "__main__":
  main(sys.argv[1:])
