"""Texts cut into pieces of bounded size before a tokenizer reads them.

SentencePiece's memory grows with the length of the string it encodes (about
125 bytes per byte of text), so a single document of hundreds of megabytes
(a book-sized JSONL record, a text file without line breaks) would take tens
of gigabytes. Documents longer than MAX_DOCUMENT_BYTES are cut at a line break
(else a space, else a character boundary) into pieces, each then treated as a
document (its own EOS; pretrain/data/long_documents.py): one extra EOS per ~60k
tokens, against memory that stays bounded. Tokenizer training cuts its lines
the same way, shorter.
"""

MAX_DOCUMENT_BYTES = 1 << 18


def _cut(text: bytes, max_bytes: int) -> int:
  """Where the first piece of `text` ends: after the last line break (else space) in its first `max_bytes`
  bytes, else at the last character boundary before them."""
  for separator in (b"\n", b" "):
    end = text.rfind(separator, 0, max_bytes)
    if end > 0:
      return end + 1
  end = max_bytes
  while end > 0 and text[end] & 0xC0 == 0x80:  # A UTF-8 continuation byte: not a character's start.
    end -= 1
  return end or max_bytes


def pieces(text: bytes, max_bytes: int = MAX_DOCUMENT_BYTES) -> list[bytes]:
  """`text` cut into pieces of at most `max_bytes` bytes (UTF-8 kept whole); one piece if short enough."""
  out = []
  while len(text) > max_bytes:
    end = _cut(text, max_bytes)
    out.append(text[:end])
    text = text[end:]
  return out + [text] if text or not out else out
