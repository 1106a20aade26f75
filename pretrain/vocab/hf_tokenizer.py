"""A Hugging Face fast tokenizer (tokenizer.json) equal to a run's vocabulary.

A vocabulary of the `tokenizers` kinds (pretrain/vocab/tokenizers_json.py) is a tokenizer.json already: it is
written with the sentinels and the post-processor below. The SentencePiece model is unigram (or BPE, as ranked
merges) with byte fallback, identity normalisation and a dummy-prefix space (pretrain/vocab/pipeline.py).
SentencePiece first cuts the text into words, each a run of spaces followed by non-spaces, then segments each
word; the pre-tokenizer below cuts the same words, so the unigram lattice is the same. The objectives' special
pieces and seqio's sentinels are added tokens, matched whole wherever they occur, as SentencePiece matches user
symbols.
"""

import json
import os

import tokenizers
from sentencepiece import sentencepiece_model_pb2
from tokenizers import decoders, models as tok_models, pre_tokenizers, processors

from pretrain.system import files
from pretrain import vocab as text_vocab

SPACE = "\u2581"
TOKENIZER_MODEL = "tokenizer.model"  # The SentencePiece model itself, for import and for slow tokenizers.


def build(vocabulary, bos: bool) -> tokenizers.Tokenizer:
  """The tokenizer; with special tokens, inputs start with id 0 (`bos`: Llama's, the BOS of training) or else
  end with EOS (T5's), as seqio's tasks make them."""
  if vocabulary.kind == "sentencepiece":
    tokenizer = _from_sentencepiece(vocabulary)
  else:  # The vocabulary's own tokenizer, sentinels included.
    tokenizer = tokenizers.Tokenizer.from_str(vocabulary.tokenizer.to_str())
  pad, eos = ("<pad>", text_vocab.PAD_ID), ("</s>", text_vocab.EOS_ID)
  if bos:
    tokenizer.post_processor = processors.TemplateProcessing(single="<pad> $A", pair="<pad> $A $B:1",
                                                             special_tokens=[pad])
  else:
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B:1 </s>:1",
                                                             special_tokens=[eos])
  return tokenizer


def _from_sentencepiece(vocabulary) -> tokenizers.Tokenizer:
  proto = sentencepiece_model_pb2.ModelProto()
  with files.open_file(vocabulary.file, "rb") as f:  # The model as trained, without seqio's sentinels.
    proto.ParseFromString(f.read())
  extra_ids = vocabulary.extra_ids
  if proto.trainer_spec.model_type == proto.trainer_spec.BPE:
    model = tok_models.BPE({p.piece: i for i, p in enumerate(proto.pieces)}, _bpe_merges(proto),
                           unk_token=proto.pieces[text_vocab.UNK_ID].piece, byte_fallback=True)
  else:
    model = tok_models.Unigram([(p.piece, p.score) for p in proto.pieces], unk_id=text_vocab.UNK_ID, byte_fallback=True)
  tokenizer = tokenizers.Tokenizer(model)
  prepend = "first" if proto.normalizer_spec.add_dummy_prefix else "never"
  tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme=prepend, split=False),
      pre_tokenizers.Split(tokenizers.Regex(f"{SPACE}+[^{SPACE}]*|[^{SPACE}]+"), behavior="isolated"),
  ])
  tokenizer.decoder = decoders.Sequence([
      decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse(),
      *([decoders.Strip(" ", 1, 0)] if prepend == "first" else []),
  ])
  control = [p.piece for p in proto.pieces if p.type == sentencepiece_model_pb2.ModelProto.SentencePiece.CONTROL]
  user = [p.piece for p in proto.pieces if p.type == sentencepiece_model_pb2.ModelProto.SentencePiece.USER_DEFINED]
  tokenizer.add_special_tokens([tokenizers.AddedToken(p, normalized=False) for p in control])
  tokenizer.add_tokens([tokenizers.AddedToken(p, normalized=False) for p in user])
  # seqio numbers sentinels down from the top (<extra_id_0> is the last id) and
  # spells them "▁<extra_id_N>": a space before one belongs to it.
  sentinels = [f"<extra_id_{i}>" for i in reversed(range(extra_ids))]
  tokenizer.add_special_tokens([tokenizers.AddedToken(s, normalized=False, lstrip=True) for s in sentinels])
  return tokenizer


def _bpe_merges(proto) -> list[tuple[str, str]]:
  """SentencePiece's BPE joins the adjacent pair whose union is the piece of the highest score; as ranked merges:
  every split of each learned piece into two pieces, the pieces in the order of their scores."""
  ids = {p.piece: i for i, p in enumerate(proto.pieces)}
  learned = [p for p in proto.pieces if p.type == sentencepiece_model_pb2.ModelProto.SentencePiece.NORMAL]
  merges = []
  for p in sorted(learned, key=lambda p: -p.score):  # Stable: ties keep the model's order.
    splits = [(p.piece[:k], p.piece[k:]) for k in range(1, len(p.piece))]
    merges += sorted(((a, b) for a, b in splits if a in ids and b in ids), key=lambda ab: (ids[ab[0]], ids[ab[1]]))
  return merges


def write(vocabulary, out_dir: str, bos: bool) -> None:
  """tokenizer.json, tokenizer_config.json, special_tokens_map.json and, of a SentencePiece vocabulary, its
  model; `bos`: see build."""
  build(vocabulary, bos).save(os.path.join(out_dir, "tokenizer.json"))
  if vocabulary.kind == "sentencepiece":
    files.copy(vocabulary.file, os.path.join(out_dir, TOKENIZER_MODEL))
  extra_ids = vocabulary.extra_ids
  special = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
  if bos:
    # The decoder-only model reads targets shifted right after id 0: id 0 plays the part of BOS.
    special["bos_token"] = "<pad>"
  config = {
      "tokenizer_class": "PreTrainedTokenizerFast", **special,
      "add_bos_token": bos, "add_eos_token": not bos, "extra_ids": extra_ids,
      "model_max_length": 1_000_000_000, "clean_up_tokenization_spaces": False,
  }
  with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
    json.dump(config, f, indent=2)
  with open(os.path.join(out_dir, "special_tokens_map.json"), "w") as f:
    json.dump(special, f, indent=2)
