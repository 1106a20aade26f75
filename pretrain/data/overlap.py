"""Passages that documents share, as word 13-grams (shingles): the unit of GPT-3's contamination check (Brown et
al. 2020, appendix C). Thirteen words in a row that two documents share are copied, not chance.

- shares / pooled_share: how much of some documents' text occurs in reference documents (of a held-out split,
  what a model trained on the train split has seen);
- Clusters: documents linked when one holds at least LINK of the other's shingles (a pydoc page and a section of
  it, a module docstring and its copy), grouped by union-find, so that a split can keep each group together.

Words are normalised as the deduplication's (pretrain/data/dedup.py).
"""

import collections
import itertools

from pretrain.data import dedup

SHINGLE_WORDS = 13
# Two documents are one cluster when this share of the smaller one's shingles stands in the other.
LINK = 0.1


def shingles(text: str) -> set[str]:
  """The word 13-grams of `text` (its words as one shingle when it has fewer)."""
  return dedup.shingles(text, SHINGLE_WORDS)


def pooled(documents) -> set[str]:
  """The shingles of all the documents together."""
  return set().union(*map(shingles, documents))


def shares(documents, reference) -> list[float]:
  """For each of `documents`, the share of its shingles found among the shingles of the `reference` documents."""
  seen = pooled(reference)
  return [len(s & seen) / len(s) for s in map(shingles, documents)]


def pooled_share(documents, reference) -> float:
  """The share of the documents' distinct shingles (all together) found among the reference documents'."""
  theirs = pooled(documents)
  return len(theirs & pooled(reference)) / max(len(theirs), 1)


class Clusters:
  """Documents 0..n-1 of `sets` (their shingles) grouped by union-find: two that share at least `link` of the
  smaller one's shingles start in one cluster; join() merges more."""

  def __init__(self, sets: list[set[str]], link: float = LINK):
    self.sets = sets
    self._parent = list(range(len(sets)))
    holders = collections.defaultdict(list)  # An inverted index: shingle -> the documents that have it.
    for i, s in enumerate(sets):
      for shingle in s:
        holders[shingle].append(i)
    shared = collections.Counter(pair for ids in holders.values() if len(ids) > 1
                                 for pair in itertools.combinations(ids, 2))
    self._neighbours = collections.defaultdict(set)
    for (a, b), n in sorted(shared.items()):
      self._neighbours[a].add(b)
      self._neighbours[b].add(a)
      if n >= link * min(len(sets[a]), len(sets[b])):
        self.join(a, b)

  def find(self, i: int) -> int:
    """The root of i's cluster."""
    while self._parent[i] != i:
      self._parent[i] = self._parent[self._parent[i]]
      i = self._parent[i]
    return i

  def join(self, a: int, b: int) -> None:
    """One cluster of a's and b's (the smaller root stays root: the result does not depend on the order)."""
    a, b = sorted((self.find(a), self.find(b)))
    self._parent[b] = a

  def sharing(self, i: int) -> list[int]:
    """The documents that share at least one shingle with document i, in order."""
    return sorted(self._neighbours[i])

  def members(self) -> dict[int, list[int]]:
    """{root: the documents of its cluster, in order}."""
    found = collections.defaultdict(list)
    for i in range(len(self.sets)):
      found[self.find(i)].append(i)
    return dict(found)
