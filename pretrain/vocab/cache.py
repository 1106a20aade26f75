"""Vocabularies trained once per distinct text and options, into the data cache (pretrain/system/data_cache.py), by one
process of those that start together."""

import hashlib
import json
import os
import sys

from pretrain import vocab
from pretrain.system import files
from pretrain.system.data_cache import build_once


def cached_model(texts, vocab_size: int, model_type: str, cache: str, special: tuple[str, ...],
                 extra_ids: int = vocab.EXTRA_IDS, kind: str = "sentencepiece") -> str:
  """Path of a `kind` model trained on `texts` (vocab.train), trained once per distinct text and options."""
  spec = vocab.KINDS[kind]
  if not spec.learns:  # The same model for any text.
    texts, vocab_size = [], spec.size(vocab_size, extra_ids, special) + extra_ids
  texts = list(texts)
  digest = hashlib.sha256(json.dumps([vocab_size, *spec.cache_options(model_type, extra_ids, special)],
                                     sort_keys=True).encode())
  for text in texts:
    digest.update(hashlib.sha256(text.encode("utf-8")).digest())
  path = os.path.join(cache, "tokenizers", f"{spec.cache_prefix}_{vocab_size}_{digest.hexdigest()[:16]}{spec.suffix}")

  def build():
    if os.path.exists(path):  # There, but not a model: damaged (cut short, overwritten).
      aside = f"{path}.damaged-{os.getpid()}"
      os.replace(path, aside)
      print(f"warning: the cached vocabulary {path} is not a {spec.what}; moved aside to {aside}, "
            "training it again", file=sys.stderr, flush=True)
    print(f"Training a {vocab_size}-token {kind} vocabulary (once) -> {path}", file=sys.stderr, flush=True)
    files.write_atomically(path, vocab.train(texts, kind, vocab_size, model_type, extra_ids, special))

  build_once(path, lambda: os.path.exists(path) and vocab.kind_of(vocab.read(path)) is not None, build)
  return path
