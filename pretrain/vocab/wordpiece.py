"""The wordpiece kind: BERT's WordPiece, cased: BERT's normaliser (control characters dropped, a space around each
CJK character) and pre-tokenizer (words split at white space and punctuation). Not lossless: decoding puts one
space between words, so runs of spaces, tabs and newlines come back as single spaces, and a word with a
character the training text did not hold becomes the unknown id."""

import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

from pretrain.vocab.tokenizers_json import CONTROL, TokenizersKind

WORD_PREFIX = "##"  # WordPiece's mark of a piece that continues a word.


class WordPiece(TokenizersKind):
  name = "wordpiece"

  def is_spec(self, spec):
    return spec["model"]["type"] == "WordPiece" and (spec.get("pre_tokenizer") or {}).get("type") == "BertPreTokenizer"

  def train(self, texts, pieces, special, model_type=None):
    del model_type  # SentencePiece's.
    tokenizer = tokenizers.Tokenizer(models.WordPiece(unk_token=CONTROL[2], continuing_subword_prefix=WORD_PREFIX))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix=WORD_PREFIX)
    trainer = trainers.WordPieceTrainer(vocab_size=pieces, special_tokens=[*CONTROL, *special], show_progress=False,
                                        continuing_subword_prefix=WORD_PREFIX)
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer.to_str().encode()

  def piece_text(self, token):
    """A piece that starts a word stands for a space and the piece (decoding puts a space between words)."""
    return (token[len(WORD_PREFIX):] if token.startswith(WORD_PREFIX) else " " + token).encode("utf-8")


KIND = WordPiece()
