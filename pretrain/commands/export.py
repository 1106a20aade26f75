"""Exports the latest checkpoint of a run to a Hugging Face directory.

  pretrain export --workdir=runs/quickstart --out=runs/quickstart-hf

Writes config.json, model.safetensors (shards of --max_shard_size and their
index beyond it, as transformers saves) and the tokenizer (tokenizer.json plus
the SentencePiece tokenizer.model). Decoder-only runs load in transformers as
LlamaForCausalLM (with experts MixtralForCausalLM or Qwen2MoeForCausalLM),
encoder-decoder runs as T5ForConditionalGeneration (with experts
SwitchTransformersForConditionalGeneration):

  transformers.AutoModelForCausalLM.from_pretrained("runs/quickstart-hf")

The Llama tokenizer prepends id 0 (<pad>) as its BOS, as the model was
trained: its inputs are the targets shifted right after id 0.
"""

import argparse
import re
import sys

from pretrain import cli
from pretrain.system.errors import exit_on_user_error


def _size(text: str) -> str:
  """A size as transformers writes it: a number and KB, MB, GB or TB."""
  if not re.fullmatch(r"\s*\d+(\.\d+)?\s*[KMGT]B\s*", text, re.IGNORECASE):
    raise argparse.ArgumentTypeError(f"{text!r} is not a size: give a number and KB, MB, GB or TB, e.g. 5GB")
  return text


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain export") -> None:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--workdir", required=True, type=cli.run_workdir, help="a run of pretrain train")
  parser.add_argument("--out", required=True, type=cli.output_dir, help="a new (or empty) directory to write")
  parser.add_argument("--max_shard_size", type=_size, default="5GB",
                      help="weights in files of at most this size, e.g. 5GB or 500MB (default: %(default)s, as "
                           "transformers' save_pretrained)")
  args = parser.parse_args(argv)
  if "://" in args.out:  # transformers and safetensors write files; a bucket is reached by copying them.
    parser.error(f"--out={args.out} is a URL: the export writes a local directory; give one, then copy it to the "
                 "bucket (gcloud storage cp -r DIR URL)")

  from pretrain import hf, run as run_lib  # pylint: disable=g-import-not-at-top  (not for --help)

  hf.refuse_written(args.out)  # Before the minutes of reading a large run.
  run, params, step = run_lib.load(args.workdir, pipeline=False)
  if run.family.prefix_lm:
    print(f"warning: {run.cfg.data.objective} trained a prefix-LM; LlamaForCausalLM attends causally everywhere, so "
          "on a prompt it computes what this model computes without the bidirectional prefix", file=sys.stderr)
  architecture = hf.export(args.out, run, params, max_shard_size=args.max_shard_size)
  print(f"Wrote {args.out}: {architecture} of step {step}")


if __name__ == "__main__":
  main(sys.argv[1:])
