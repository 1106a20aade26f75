"""Vocabularies: one module per kind and their registry (KINDS), read without TensorFlow or seqio.

The kinds (tokenizer.kind): sentencepiece (unigram or BPE, the default; sentencepiece.py), and the kinds made
with the `tokenizers` library (tokenizers_json.py): wordpiece, byte_bpe, byte_unigram, bytes and words
(wordpiece.py, byte_bpe.py, byte_unigram.py, utf8_bytes.py, words.py). A kind says how it trains, how its model
file is told apart, how it reads (encode, decode, the text of each id) and its Hugging Face tokenizer.json. Around
them: the registry and what reads, checks, loads and trains any kind (kinds.py), the ids and helpers every kind
shares (ids.py), training once per text and options into the cache (cache.py), the Hugging Face tokenizer files
(hf_export.py), and the seqio vocabularies the data path maps (pipeline.py, the only module here that imports
TensorFlow). The commands that read no data, `generate` and `export`, load a run's vocabulary here without those
imports' seconds. This file only names what callers use.
"""

from pretrain.vocab.ids import (EOS_ID, EXTRA_IDS, PAD_ID, UNK_ID, bytes_per_id, first_regular_id, sentinel_id,
                                single_piece_id)
from pretrain.vocab.kinds import (KINDS, check_size, check_unread, checked, from_bytes, kind_of, load, read,
                                  take_kind, take_kind_from_file, train)

__all__ = ["EOS_ID", "EXTRA_IDS", "PAD_ID", "UNK_ID", "bytes_per_id", "first_regular_id", "sentinel_id",
           "single_piece_id", "KINDS", "check_size", "check_unread", "checked", "from_bytes", "kind_of", "load", "read",
           "take_kind", "take_kind_from_file", "train"]
