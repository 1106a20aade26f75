"""The bytes kind: one id per UTF-8 byte, byte b at 3 + len(special) + b (ByT5 without merges; the special tokens
come first, as in every kind). Lossless; its size is fixed, tokenizer.vocab_size does not apply, and it learns
nothing from the text."""

import tokenizers
from tokenizers import models

from pretrain.vocab.tokenizers_json import CONTROL, TokenizersKind, byte_chars, byte_level, byte_text


class Bytes(TokenizersKind):
  name = "bytes"
  learns = False

  def is_spec(self, spec):
    model, pre = spec["model"], (spec.get("pre_tokenizer") or {}).get("type")
    return model["type"] == "BPE" and pre == "ByteLevel" and not model["merges"]

  def train(self, texts, pieces, special, model_type=None):
    del texts, pieces, model_type  # Nothing to learn.
    tokens = [*CONTROL, *special]
    vocabulary = {token: i for i, token in enumerate(tokens)}
    vocabulary.update({c: len(tokens) + b for b, c in enumerate(byte_chars())})
    tokenizer = byte_level(tokenizers.Tokenizer(models.BPE(vocabulary, [])), split_words=False)
    tokenizer.add_special_tokens(tokens)  # Matched whole, as the trainers of the other kinds add them.
    return tokenizer.to_str().encode()

  def size(self, vocab_size, extra_ids, special):
    return len(CONTROL) + len(special) + 256

  def piece_text(self, token):
    return byte_text(token)


KIND = Bytes()
