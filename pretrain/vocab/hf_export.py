"""A Hugging Face fast tokenizer (tokenizer.json and its config files) equal to a run's vocabulary: its kind's
tokenizer.json (the kind's hf_tokenizer) with the post-processor its model family's inputs need."""

import json
import os

from tokenizers import processors

from pretrain import vocab
from pretrain.system import files

TOKENIZER_MODEL = "tokenizer.model"  # The SentencePiece model itself, for import and for slow tokenizers.


def build(vocabulary, bos: bool):
  """The tokenizer; with special tokens, inputs start with id 0 (`bos`: Llama's, the BOS of training) or else
  end with EOS (T5's), as seqio's tasks make them."""
  tokenizer = vocab.KINDS[vocabulary.kind].hf_tokenizer(vocabulary)
  pad, eos = ("<pad>", vocab.PAD_ID), ("</s>", vocab.EOS_ID)
  if bos:
    tokenizer.post_processor = processors.TemplateProcessing(single="<pad> $A", pair="<pad> $A $B:1",
                                                             special_tokens=[pad])
  else:
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B:1 </s>:1",
                                                             special_tokens=[eos])
  return tokenizer


def write(vocabulary, out_dir: str, bos: bool) -> None:
  """tokenizer.json, tokenizer_config.json, special_tokens_map.json and, of a SentencePiece vocabulary, its
  model; `bos`: see build."""
  build(vocabulary, bos).save(os.path.join(out_dir, "tokenizer.json"))
  if vocabulary.kind == "sentencepiece":
    files.copy(vocabulary.file, os.path.join(out_dir, TOKENIZER_MODEL))
  special = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
  if bos:
    # The decoder-only model reads targets shifted right after id 0: id 0 plays the part of BOS.
    special["bos_token"] = "<pad>"
  config = {
      "tokenizer_class": "PreTrainedTokenizerFast", **special,
      "add_bos_token": bos, "add_eos_token": not bos, "extra_ids": vocabulary.extra_ids,
      "model_max_length": 1_000_000_000, "clean_up_tokenization_spaces": False,
      **vocab.KINDS[vocabulary.kind].hf_tokenizer_config,
  }
  with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
    json.dump(config, f, indent=2)
  with open(os.path.join(out_dir, "special_tokens_map.json"), "w") as f:
    json.dump(special, f, indent=2)
