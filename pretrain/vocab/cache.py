"""Vocabularies trained once per distinct text and options, into the data cache (pretrain/system/data_cache.py), by one
process of those that start together."""

import hashlib
import json
import os
import sys

from pretrain import vocab
from pretrain.system import files
from pretrain.system.data_cache import build_once

# A source's identity (what its texts depend on) -> the digest of those texts: read and hashed once per process,
# not at every run's start (a second or so of the bundled corpus).
_TEXT_DIGESTS: dict[str, bytes] = {}  # Each text's SHA-256, in order.


def cached_model(texts, vocab_size: int, model_type: str, cache: str, special: tuple[str, ...],
                 extra_ids: int = vocab.EXTRA_IDS, kind: str = "sentencepiece", identity: str | None = None) -> str:
  """Path of a `kind` model trained on `texts` (vocab.train), trained once per distinct text and options.
  `identity`: a key that changes whenever `texts` would (data.sources' identity), so they are read only to train."""
  spec = vocab.KINDS[kind]
  if not spec.learns:  # The same model for any text.
    texts, vocab_size, identity = [], spec.size(vocab_size, extra_ids, special) + extra_ids, None
  if identity not in _TEXT_DIGESTS:
    texts = list(texts)
    text_digests = b"".join(hashlib.sha256(text.encode("utf-8")).digest() for text in texts)
    if identity is not None:
      _TEXT_DIGESTS[identity] = text_digests
  else:
    text_digests = _TEXT_DIGESTS[identity]
  digest = hashlib.sha256(json.dumps([vocab_size, *spec.cache_options(model_type, extra_ids, special)],
                                     sort_keys=True).encode() + text_digests)
  path = os.path.join(cache, "tokenizers", f"{spec.cache_prefix}_{vocab_size}_{digest.hexdigest()[:16]}{spec.suffix}")

  def build():
    if os.path.exists(path):  # There, but not a model: damaged (cut short, overwritten).
      aside = f"{path}.damaged-{os.getpid()}"
      os.replace(path, aside)
      print(f"warning: the cached vocabulary {path} is not a {spec.what}; moved aside to {aside}, "
            "training it again", file=sys.stderr, flush=True)
    print(f"Training a {vocab_size}-token {kind} vocabulary (once) -> {path}", file=sys.stderr, flush=True)
    files.write_atomically(path, vocab.train(list(texts), kind, vocab_size, model_type, extra_ids, special))

  build_once(path, lambda: os.path.exists(path) and vocab.kind_of(vocab.read(path)) is not None, build)
  return path
