"""Exact and near-duplicate detection (pretrain/data/dedup.py) on real text."""

import random

import pytest

from pretrain.data import dedup

_WORDS = ("model data token layer train batch loss step gradient value attention head sequence vocabulary corpus "
          "document sentence network weight update learning rate schedule memory device shard mesh").split()


def _document(seed: int, n: int = 400) -> str:
  rng = random.Random(seed)
  return " ".join(rng.choice(_WORDS) for _ in range(n))


def _edited(text: str, edits: int) -> str:
  """`text` with `edits` words replaced, spread over it."""
  words = text.split()
  for i in range(edits):
    words[(i + 1) * len(words) // (edits + 1)] = f"edit{i}"
  return " ".join(words)


def test_exact_duplicates_are_equal_after_normalising():
  seen = dedup.Deduplicator("exact")
  assert seen.check("a", "The Model, trained.\n\nIt works!") is None
  assert seen.check("b", "the model   trained it WORKS") == ("exact", "a")
  assert seen.check("c", "the model trained it works again") is None


def test_an_edited_copy_at_ninety_percent_jaccard_is_caught_and_an_unrelated_document_is_not():
  original = _document(0)
  copy = _edited(original, 4)
  assert 0.88 <= dedup.jaccard(original, copy) <= 0.92
  unrelated = _document(1)
  assert dedup.jaccard(original, unrelated) < 0.1
  seen = dedup.Deduplicator("near", threshold=0.8)
  assert seen.check("original", original) is None
  assert seen.check("copy", copy) == ("near", "original")
  assert seen.check("unrelated", unrelated) is None
  # Exact mode does not see the edited copy.
  exact = dedup.Deduplicator("exact")
  assert exact.check("original", original) is None and exact.check("copy", copy) is None


@pytest.mark.parametrize("edits, caught", [(2, True), (30, False)])
def test_the_threshold_decides(edits, caught):
  original = _document(2)
  seen = dedup.Deduplicator("near", threshold=0.8)
  seen.check("original", original)
  assert (seen.check("copy", _edited(original, edits)) is not None) == caught


def test_the_earliest_copy_is_named_and_decisions_repeat():
  texts = [_document(3), _document(4), _edited(_document(3), 1), _edited(_document(4), 2), _document(5)]
  decisions = []
  for _ in range(2):
    seen = dedup.Deduplicator("near")
    decisions.append([seen.check(str(i), t) for i, t in enumerate(texts)])
  assert decisions[0] == decisions[1] == [None, None, ("near", "0"), ("near", "1"), None]
