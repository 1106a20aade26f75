"""The words kind: one id per word of the training text (split at white space), the most frequent first up to
tokenizer.vocab_size, every other word the unknown id; a line break reads as the end of a sentence, EOS (Penn
Treebank's convention: a corpus of one sentence per line, `<unk>` already in its text). Word-level language
modelling's vocabulary, so that per-word perplexities compare with the literature's directly. Not lossless:
decoding puts one space between words."""

import collections

import tokenizers
from tokenizers import models, normalizers, pre_tokenizers

from pretrain.vocab.tokenizers_json import CONTROL, TokenizersKind


class Words(TokenizersKind):
  name = "words"

  def is_spec(self, spec):
    return spec["model"]["type"] == "WordLevel" and (spec.get("pre_tokenizer") or {}).get("type") == "WhitespaceSplit"

  def train(self, texts, pieces, special, model_type=None):
    del model_type  # SentencePiece's.
    # Counted here: tokenizers' WordLevelTrainer gives a word of the text that is also a special token ('<unk>' in
    # the Penn Treebank) a second id.
    reserved = [*CONTROL, *special]
    counts = collections.Counter(word for text in texts for word in text.split() if word not in reserved)
    words = sorted(counts, key=lambda w: (-counts[w], w))[:max(pieces - len(reserved), 0)]
    tokenizer = tokenizers.Tokenizer(models.WordLevel({w: i for i, w in enumerate([*reserved, *words])},
                                                      unk_token=CONTROL[2]))
    tokenizer.normalizer = normalizers.Replace("\n", f" {CONTROL[1]} ")  # The vocabulary's EOS piece, '</s>'.
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(reserved)  # Matched whole, as the trainers of the other kinds add them.
    return tokenizer.to_str().encode()

  def piece_text(self, token):
    """A word stands for a space and the word (decoding puts a space between words)."""
    return (" " + token).encode("utf-8")


KIND = Words()
