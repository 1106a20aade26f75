"""What every kind of vocabulary shares: the ids the objectives rely on, and the helpers that read any vocabulary.

Ids follow T5 and seqio in every kind: pad 0, eos 1, unk 2, no bos; `extra_ids` sentinels `<extra_id_N>` appended
at load time, `<extra_id_0>` the highest id; the objectives' special tokens are single pieces, ids 3 and up. A
vocabulary has `file` (the model it was loaded from), `workdir_name` (that file's name in a run's workdir),
`identity` (bytes that tell it from any other), `kind`, `extra_ids`, `vocab_size`, and `piece_bytes`: the text
each id stands for, which bits per byte, MLM's random tokens and the sentence boundaries read.
"""

import numpy as np

from pretrain.system.errors import UserError

PAD_ID, EOS_ID, UNK_ID = 0, 1, 2
EXTRA_IDS = 100  # Sentinels by default, as T5; tokenizer.extra_ids sets another count.


def single_piece_id(vocabulary, token: str) -> int:
  """The id of a special token, which must encode to exactly one piece (a space SentencePiece puts before it
  aside)."""
  found = [i for i in vocabulary.encode(token) if vocabulary.piece_bytes[i] != b" "]
  if len(found) != 1:
    raise UserError(f"the vocabulary encodes {token!r} as {len(found)} pieces, not one; train a vocabulary "
                    "with `pretrain train-tokenizer`, which adds the special tokens as single pieces")
  return found[0]


def sentinel_id(vocabulary, index: int) -> int:
  """The id of `<extra_id_{index}>`: sentinels count down from the top of the vocabulary."""
  return vocabulary.vocab_size - 1 - index


def first_regular_id(vocabulary) -> int:
  """Ids below this are control ids and special pieces (the objectives' tokens): the first id of text."""
  return next((i for i, text in enumerate(vocabulary.piece_bytes) if text is not None), vocabulary.vocab_size)


def bytes_per_id(vocabulary) -> np.ndarray:
  """The UTF-8 bytes of the text each id stands for: 0 for control ids, the objectives' special pieces and the
  sentinels. Bits per byte divide by their sum over the loss-bearing targets. The space SentencePiece puts
  before a document's first word counts: one byte per document that the text does not hold (about 0.1% of the
  bundled corpus's bytes); so does the space WordPiece's decoding puts before each word (see wordpiece.py)."""
  return np.asarray([len(text or b"") for text in vocabulary.piece_bytes], np.float32)


def continuation_text(vocabulary, prompt: list[int], continuation: list[int]) -> str:
  """The text `continuation` adds to `prompt`'s: decoded alone, a SentencePiece continuation would lose a space
  that starts it, read as the dummy prefix of a text."""
  before, whole = vocabulary.decode(prompt), vocabulary.decode([*prompt, *continuation])
  if vocabulary.eos_id in prompt or not whole.startswith(before):  # Decoding stops at EOS.
    return vocabulary.decode(continuation)
  return whole[len(before):]
