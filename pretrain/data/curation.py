"""The curation stage: quality filters (data.filters) and deduplication (data.dedup) over a source's documents.

Any source (the bundled corpus, files, TFDS) can go through it: `curate(source, data_cfg)` returns a Source of
the same documents less those removed, and everything downstream (the tokenizer, the token store, the replay
pipeline, evaluation, inspection) reads that Source.

The decisions are taken once, in one pass over the source's documents in their order (validation first, then
train), and stored under the cache directory, keyed by the source's identity and the stage's settings: a
document is removed by the first filter it fails, else as a duplicate of an earlier kept document (exact or near,
pretrain/data/dedup.py). A training document that repeats a validation document is removed as
'validation_duplicate', so validation text never appears in training. The decisions are deterministic, and their
counts per rule (documents, characters, and tokens once the vocabulary is known) are written to the store's
metadata, to the workdir (data_curation.json) and by `pretrain inspect-data`.
"""

import dataclasses
import hashlib
import io
import json
import os

import numpy as np
import tqdm

from pretrain.data import dedup, filters as filters_lib
from pretrain.data import token_store
from pretrain.system import files
from pretrain.system.console import log

FORMAT = 1   # Bump when a rule or the order of decisions changes meaning.
KEEP = ""
DUPLICATE_REASONS = ("duplicate", "near_duplicate", "validation_duplicate")
# The splits, in the order their documents are decided: a training document that repeats a validation one goes.
VALIDATION, TRAIN = SPLITS = ("validation", "train")  # seqio's names, as pretrain.data.sources'


def enabled(data_cfg) -> bool:
  return bool(data_cfg.get("filters", "").strip() or data_cfg.get("dedup", ""))


class Curation:
  """The decisions of one source under one setting of data.filters, data.dedup and data.dedup_threshold."""

  def __init__(self, source, data_cfg, cache: str):
    self.source, self.filters = source, filters_lib.parse(data_cfg.filters)
    self.dedup, self.threshold = data_cfg.dedup, float(data_cfg.dedup_threshold)
    # The splits read (a TFDS slice such as train[:1%]) too: the source's content names its whole dataset.
    self.identity = (FORMAT, data_cfg.filters, self.dedup, self.threshold if self.dedup == "near" else None,
                     _user_rule_digests(self.filters), sorted(source.splits.items()))
    key = json.dumps([source.content, self.identity], sort_keys=True, default=str)
    self.directory = os.path.join(cache, "curation",
                                  f"{source.name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}")
    self._decisions = None

  @property
  def reasons(self) -> list[str]:
    """What a document can be removed for, in a fixed order (their codes in the stored decisions)."""
    return [KEEP, *(f.name for f in self.filters), *(DUPLICATE_REASONS if self.dedup else ())]

  def decisions(self) -> dict[str, np.ndarray]:
    """Per split, the code of each document's reason (0: kept), in the source's order; decided on first use."""
    if self._decisions is None:
      path = os.path.join(self.directory, "decisions.npz")
      if not os.path.exists(path):
        log(f"Curating {self.source.name} once (data.filters={', '.join(f.name for f in self.filters) or 'none'}, "
            f"data.dedup={self.dedup or 'none'}) into {self.directory}")
        image = io.BytesIO()
        np.savez(image, **self._decide())
        files.makedirs(self.directory)
        files.write_atomically(path, image.getvalue())
      with np.load(path) as stored:
        self._decisions = {split: stored[split] for split in stored.files}
    return self._decisions

  def _decide(self) -> dict[str, np.ndarray]:
    code = {reason: i for i, reason in enumerate(self.reasons)}
    seen = dedup.Deduplicator(self.dedup, self.threshold) if self.dedup else None
    decided = {}
    for split in SPLITS:
      codes = []
      for i, text in enumerate(tqdm.tqdm(self.source.texts(split), desc=f"Curating {self.source.name} {split}",
                                         unit=" documents", dynamic_ncols=True, mininterval=5)):
        reason = filters_lib.first_failing(self.filters, text)
        if reason is None and seen is not None:
          found = seen.check(f"{split}/{i}", text)
          if found:
            kind, earlier = found
            reason = ("validation_duplicate" if split == TRAIN and earlier.startswith(VALIDATION + "/")
                      else "duplicate" if kind == "exact" else "near_duplicate")
        codes.append(code[reason or KEEP])
      decided[split] = np.asarray(codes, np.uint8)
    return decided

  def keep(self, split: str) -> np.ndarray:
    return self.decisions()[split] == 0

  def removed(self, split: str):
    """(reason, text) of each removed document of `split`, in order."""
    reasons, codes = self.reasons, self.decisions()[split]
    for text, c in zip(self.source.texts(split), codes):
      if c:
        yield reasons[c], text

  def report(self, vocabulary=None) -> dict:
    """Per split: documents and characters read and kept, and removed per reason (with their tokens in
    `vocabulary`, counted once and cached)."""
    tokens = self._removed_tokens(vocabulary) if vocabulary is not None else {}
    report = {"filters": [[f.name, list(f.thresholds)] for f in self.filters], "dedup": self.dedup or None,
              "dedup_threshold": self.threshold if self.dedup == "near" else None}
    for split, codes in self.decisions().items():
      counts = np.bincount(codes, minlength=len(self.reasons))
      removed = {reason: {"documents": int(counts[c])} for c, reason in enumerate(self.reasons) if c}
      for reason, n in tokens.get(split, {}).items():
        removed[reason]["tokens"] = n
      report[split] = {"documents": len(codes), "kept": int(counts[0]), "removed": removed}
    return report

  def _removed_tokens(self, vocabulary) -> dict:
    path = os.path.join(self.directory, f"removed-tokens-{token_store.vocabulary_digest(vocabulary)}.json")
    if not os.path.exists(path):
      counts = {}
      for split in self.decisions():
        per_reason = dict.fromkeys(self.reasons[1:], 0)
        for reason, text in self.removed(split):
          per_reason[reason] += len(vocabulary.encode(text))
        counts[split] = per_reason
      files.write_atomically(path, json.dumps(counts).encode())
    return json.loads(files.read_text(path))


def _user_rule_digests(filters: list) -> list:
  """The text of each user rule's file: a changed rule decides again."""
  return [hashlib.sha256(open(f.name.split(":")[0], "rb").read()).hexdigest()[:16]
          for f in filters if f.name.split(":")[0].endswith(".py")]
