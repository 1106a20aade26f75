"""Exports the latest checkpoint of a run to a Hugging Face directory.

  pretrain export --workdir=runs/quickstart --out=runs/quickstart-hf

Writes config.json, model.safetensors and the tokenizer (tokenizer.json plus
the SentencePiece tokenizer.model). Decoder-only runs load in transformers as
LlamaForCausalLM, encoder-decoder runs as T5ForConditionalGeneration:

  transformers.AutoModelForCausalLM.from_pretrained("runs/quickstart-hf")

The Llama tokenizer prepends id 0 (<pad>) as its BOS, as the model was
trained: its inputs are the targets shifted right after id 0.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pretrain.errors import exit_on_user_error  # pylint: disable=g-import-not-at-top


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain export") -> None:
  parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--workdir", required=True, help="a run of python -m pretrain.train")
  parser.add_argument("--out", required=True, help="a new (or empty) directory to write")
  args = parser.parse_args(argv)

  from pretrain import hf  # pylint: disable=g-import-not-at-top
  from pretrain.train import restore  # pylint: disable=g-import-not-at-top
  from pretrain.train.loop import VOCAB_FILE  # pylint: disable=g-import-not-at-top

  run = restore.load(args.workdir)
  hf.family(run.model)  # Refuses an encoder-only model before anything is written.
  if run.objective.converter == "prefix_lm":
    print(f"warning: {run.cfg.data.objective} trained a prefix-LM; LlamaForCausalLM attends causally everywhere, so "
          "on a prompt it computes what this model computes without the bidirectional prefix", file=sys.stderr)
  architecture = hf.export(args.out, run.model, run.cfg.model, run.params, os.path.join(args.workdir, VOCAB_FILE),
                           run.cfg.tokenizer.extra_ids, sum(run.lengths.values()))
  print(f"Wrote {args.out}: {architecture} of step {run.step}")


if __name__ == "__main__":
  main(sys.argv[1:])
