"""The byte_unigram kind: a unigram language model (Kudo's, as SentencePiece's unigram) over GPT-2's byte-level
characters and word split. Lossless, no unknown id."""

import tokenizers
from tokenizers import models, trainers

from pretrain.vocab.tokenizers_json import CONTROL, TokenizersKind, byte_chars, byte_level, byte_text


class ByteUnigram(TokenizersKind):
  name = "byte_unigram"

  def is_spec(self, spec):
    return spec["model"]["type"] == "Unigram" and (spec.get("pre_tokenizer") or {}).get("type") == "ByteLevel"

  def train(self, texts, pieces, special, model_type=None):
    del model_type  # SentencePiece's.
    tokenizer = byte_level(tokenizers.Tokenizer(models.Unigram()), split_words=True)
    trainer = trainers.UnigramTrainer(vocab_size=pieces, special_tokens=[*CONTROL, *special], unk_token=CONTROL[2],
                                      initial_alphabet=list(byte_chars()), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer.to_str().encode()

  def piece_text(self, token):
    return byte_text(token)


KIND = ByteUnigram()
