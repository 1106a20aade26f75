"""A labelled downstream task that no objective trains on: which standard-library package a docstring of the
bundled corpus comes from, a topic classification over the packages with at least MIN_DOCUMENTS docstrings
(24 ways with CPython 3.11: tkinter, email, asyncio, xml, logging, ...).

Its splits are fixed by document, as the corpus's splits are (pretrain/data/corpus.py): train is the corpus's
train split (text a run may have pre-trained on, never with its label), validation the corpus's validation
split and test its downstream split, which no run pre-trains on. A document is its first PASSAGES passages of
PASSAGE_TOKENS tokens (probe.passages). Two ways to read a model on it:

- linear_probe: each document the mean of its passages' frozen representations, a ridge classifier
  (probe.fit_ridge) whose L2 weight the validation split chooses;
- finetune.finetune: the whole model and a linear head trained on the train passages for a fixed budget.
"""

import collections
import dataclasses

import numpy as np

from pretrain.downstream import probe

MIN_DOCUMENTS = 20
PASSAGES = 4
# The task's splits, from the corpus's.
SPLITS = {"train": "train", "validation": "validation", "test": "downstream"}


@dataclasses.dataclass(frozen=True)
class Split:
  documents: list[np.ndarray]  # per document, its passages [n, PASSAGE_TOKENS] (1 <= n <= PASSAGES)
  labels: np.ndarray           # per document, its class
  texts: tuple[str, ...]


def classes() -> list[str]:
  """The packages of the task: those with at least MIN_DOCUMENTS docstrings in the corpus."""
  from pretrain.data import corpus  # pylint: disable=g-import-not-at-top  (the data stack)
  counts = collections.Counter(source for _, source in corpus.labelled() if source != "pydoc")
  return sorted(name for name, n in counts.items() if n >= MIN_DOCUMENTS)


def task(vocabulary) -> tuple[list[str], dict[str, Split]]:
  """(classes, {'train', 'validation', 'test': Split}) in `vocabulary`'s tokens; a document shorter than one
  passage is left out."""
  from pretrain.data import corpus  # pylint: disable=g-import-not-at-top  (data stack: not for generate)
  names = classes()
  index = {name: i for i, name in enumerate(names)}
  rows = {split: ([], [], []) for split in SPLITS}
  split_of = {theirs: ours for ours, theirs in SPLITS.items()}
  for text, source in corpus.labelled():
    if source in index:
      tokens = vocabulary.encode(text)[:PASSAGES * probe.PASSAGE_TOKENS]
      cut = probe.passages([tokens], minimum=1)
      if cut:
        documents, labels, texts = rows[split_of[corpus.split_of(text)]]
        documents.append(cut[0])
        labels.append(index[source])
        texts.append(text)
  return names, {split: Split(d, np.asarray(l, np.int64), tuple(t)) for split, (d, l, t) in rows.items()}


def document_features(family, model, params, split: Split) -> np.ndarray:
  """[documents, D]: the mean frozen representation of each document's passages."""
  hidden = probe.representations(family, model, params, np.concatenate(split.documents))
  starts = np.cumsum([0] + [len(d) for d in split.documents])
  return np.stack([hidden[a:b].mean(0) for a, b in zip(starts[:-1], starts[1:])])


def linear_probe(family, model, params, names: list[str], splits: dict[str, Split]) -> dict:
  """Test (and validation) accuracy of a ridge classifier on frozen document features, its L2 weight the one of
  probe.RIDGES with the best validation accuracy."""
  x = {split: document_features(family, model, params, data) for split, data in splits.items()}
  y = {split: data.labels for split, data in splits.items()}
  fit = lambda ridge: probe.fit_ridge(x["train"], y["train"], ridge, len(names))
  accuracy = lambda predict, split: float(np.mean(predict(x[split]) == y[split]))
  ridge = max(probe.RIDGES, key=lambda r: accuracy(fit(r), "validation"))
  predict = fit(ridge)
  return {"accuracy": accuracy(predict, "test"), "validation_accuracy": accuracy(predict, "validation"),
          "ridge": float(ridge), "classes": len(names),
          "documents": {split: len(data.labels) for split, data in splits.items()}}
