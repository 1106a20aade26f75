"""The byte_bpe kind: GPT-2's byte-level BPE (its pre-tokenizer's word split, merges over bytes). Lossless, no
unknown id."""

import tokenizers
from tokenizers import models, trainers

from pretrain.vocab.tokenizers_json import CONTROL, TokenizersKind, byte_chars, byte_level, byte_text


class ByteBPE(TokenizersKind):
  name = "byte_bpe"

  def is_spec(self, spec):
    model, pre = spec["model"], (spec.get("pre_tokenizer") or {}).get("type")
    return model["type"] == "BPE" and pre == "ByteLevel" and bool(model["merges"])

  def train(self, texts, pieces, special, model_type=None):
    del model_type  # SentencePiece's.
    tokenizer = byte_level(tokenizers.Tokenizer(models.BPE()), split_words=True)
    trainer = trainers.BpeTrainer(vocab_size=pieces, special_tokens=[*CONTROL, *special],
                                  initial_alphabet=list(byte_chars()), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer.to_str().encode()

  def piece_text(self, token):
    return byte_text(token)


KIND = ByteBPE()
