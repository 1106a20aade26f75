"""Duplicate documents: exact (a hash of the normalised text) and near (MinHash with locality-sensitive hashing,
as Lee et al. 2022, "Deduplicating training data makes language models better").

A Deduplicator sees documents one at a time and remembers each one it keeps; a document that repeats one seen
before (the same normalised text, or word 5-grams whose estimated Jaccard similarity reaches the threshold) is
named a duplicate of it. The first copy stays. Everything is deterministic: fixed hash seeds, documents taken in
the order given.
"""

import hashlib
import re
import unicodedata

import datasketch

SHINGLE_WORDS = 5   # Lee et al. and most web pipelines compare word 5-grams.
NUM_PERM = 128      # Hash functions per signature: about 0.03 standard error on a Jaccard estimate.
SEED = 1

_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
  """The normalised words of `text`: NFKC, lower case, punctuation and spacing dropped."""
  return _WORD.findall(unicodedata.normalize("NFKC", text).lower())


def shingles(text: str, n: int = SHINGLE_WORDS) -> set[str]:
  """The word n-grams of `text` (its words as one shingle when it has fewer)."""
  w = words(text)
  return {" ".join(w[i:i + n]) for i in range(max(1, len(w) - n + 1))}


def jaccard(a: str, b: str) -> float:
  """The exact Jaccard similarity of two documents' shingles (what the signatures estimate)."""
  x, y = shingles(a), shingles(b)
  return len(x & y) / len(x | y)


class Deduplicator:
  """mode 'exact': equal normalised texts; 'near': also MinHash near-duplicates at `threshold` Jaccard."""

  def __init__(self, mode: str, threshold: float = 0.8):
    self.mode, self.threshold = mode, threshold
    self._exact: dict[bytes, str] = {}
    if mode == "near":
      self._lsh = datasketch.MinHashLSH(threshold=threshold, num_perm=NUM_PERM)
      self._signatures: dict[str, tuple[int, datasketch.LeanMinHash]] = {}  # key: (order seen, signature)

  def check(self, key: str, text: str) -> tuple[str, str] | None:
    """('exact' or 'near', the key of the earlier document) when `text` repeats one seen before; otherwise
    None, and the document is remembered under `key`."""
    digest = hashlib.sha256(" ".join(words(text)).encode()).digest()
    if digest in self._exact:
      return "exact", self._exact[digest]
    if self.mode == "near":
      signature = datasketch.MinHash(num_perm=NUM_PERM, seed=SEED)
      signature.update_batch([s.encode() for s in sorted(shingles(text))])
      signature = datasketch.LeanMinHash(signature)
      # LSH proposes candidates; the estimated similarity decides (fewer false positives), the earliest first.
      for other in sorted(self._lsh.query(signature), key=lambda k: self._signatures[k][0]):
        if signature.jaccard(self._signatures[other][1]) >= self.threshold:
          return "near", other
      self._lsh.insert(key, signature)
      self._signatures[key] = len(self._signatures), signature
    self._exact[digest] = key
    return None
