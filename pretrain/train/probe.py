"""A downstream probe: how well a model's frozen representations tell whether two passages come from the same
document, measured by a linear classifier on features of the pair.

The task needs no hand labels. Passages of PASSAGE_TOKENS tokens are cut from a source's documents. Half of the
pairs are two passages of one document, half a passage of it and one of another document, so chance is 0.5. A
passage's representation is the mean of the model's final hidden states over its tokens
(Family.representations); a pair's features are |a - b| and a * b (as in sentence-pair probes since InferSent). The classifier is ridge regression on the standardised features, its
L2 weight chosen by cross-validation, fitted on the pairs of some documents and tested on the pairs of the
others, so the test accuracy is on documents the probe has not seen.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np

from pretrain.errors import UserError

PASSAGE_TOKENS = 32
PAIRS_PER_DOCUMENT = 4   # Of each kind: same document, other document.
TEST_SHARE = 0.4         # Of the documents.
RIDGES = 10.0 ** np.arange(6)  # L2 weights on the standardised features, chosen among by cross-validation.
FOLDS = 4
BATCH = 64


def passages(documents: list[list[int]]) -> list[np.ndarray]:
  """Each document's consecutive passages [n, PASSAGE_TOKENS], for documents with at least two."""
  cut = []
  for tokens in documents:
    n = len(tokens) // PASSAGE_TOKENS
    if n >= 2:
      cut.append(np.asarray(tokens[:n * PASSAGE_TOKENS], np.int32).reshape(n, PASSAGE_TOKENS))
  return cut


def pairs(counts: list[int], documents: np.ndarray, rng: np.random.Generator) -> np.ndarray:
  """Rows (document, passage, other document, its passage, same) for `documents` (indices into `counts`,
  the passages of each document): PAIRS_PER_DOCUMENT of each kind per document, negatives among `documents`."""
  rows = []
  for d in documents:
    for _ in range(PAIRS_PER_DOCUMENT):
      i, j = rng.choice(counts[d], 2, replace=False)
      rows.append((d, i, d, j, 1))
      other = rng.choice(documents[documents != d])
      rows.append((d, i, other, rng.integers(counts[other]), 0))
  return np.asarray(rows)


def _representations(family, model, params, rows: np.ndarray) -> np.ndarray:
  """Mean final hidden state of each row of tokens."""

  @jax.jit
  def mean_hidden(params, tokens_BL):
    return family.representations(model, params, tokens_BL).astype(jnp.float32).mean(axis=1)

  pad = (-len(rows)) % BATCH  # Whole batches: one compilation.
  padded = np.concatenate([rows, np.zeros((pad, rows.shape[1]), rows.dtype)])
  out = [np.asarray(mean_hidden(params, padded[i:i + BATCH])) for i in range(0, len(padded), BATCH)]
  return np.concatenate(out)[:len(rows)]


def _features(embedded: list[np.ndarray], rows: np.ndarray) -> np.ndarray:
  a = np.stack([embedded[d][i] for d, i in rows[:, :2]])
  b = np.stack([embedded[d][i] for d, i in rows[:, 2:4]])
  return np.concatenate([np.abs(a - b), a * b], axis=1)


def fit_ridge(x: np.ndarray, y: np.ndarray, ridge: float):
  """A linear classifier of labels {0, 1}: ridge regression to -1/+1 on standardised features. Returns a
  function of features to predicted labels."""
  mean, std = x.mean(0), x.std(0) + 1e-6
  z = np.concatenate([(x - mean) / std, np.ones((len(x), 1))], axis=1)
  regulariser = ridge * np.eye(z.shape[1])
  regulariser[-1, -1] = 0  # Not the bias.
  w = np.linalg.solve(z.T @ z + regulariser, z.T @ (2.0 * y - 1))
  return lambda features: (np.concatenate([(features - mean) / std, np.ones((len(features), 1))], 1) @ w > 0)


def choose_ridge(x: np.ndarray, y: np.ndarray, groups: np.ndarray) -> float:
  """The L2 weight of RIDGES with the best accuracy over FOLDS folds of the training pairs, split by document
  (a pair's `groups`) so that no document is on both sides of a fold."""
  fold = groups % FOLDS

  def accuracy(ridge):
    return np.mean([np.mean(fit_ridge(x[fold != k], y[fold != k], ridge)(x[fold == k]) == y[fold == k])
                    for k in range(FOLDS)])

  return max(RIDGES, key=accuracy)


def same_document_probe(family, model, params, documents: list[list[int]], seed: int = 0) -> dict:
  """Train and test accuracy of the probe on `documents` (token ids), and how many pairs each holds."""
  cut = passages(documents)
  if len(cut) < 6:
    raise UserError(f"the probe needs at least 6 documents of {2 * PASSAGE_TOKENS} tokens or more; the "
                    f"validation split holds {len(cut)}")
  rng = np.random.default_rng(seed)
  order = rng.permutation(len(cut))
  test_documents, train_documents = np.split(order, [max(2, int(len(cut) * TEST_SHARE))])
  counts = [len(c) for c in cut]
  flat = np.concatenate(cut)
  starts = np.cumsum([0] + counts)
  hidden = _representations(family, model, params, flat)
  embedded = [hidden[starts[d]:starts[d + 1]] for d in range(len(cut))]
  train, test = pairs(counts, train_documents, rng), pairs(counts, test_documents, rng)
  x, y = _features(embedded, train), train[:, 4]
  ridge = choose_ridge(x, y, train[:, 0])
  predict = fit_ridge(x, y, ridge)
  accuracy = lambda rows: float(np.mean(predict(_features(embedded, rows)) == rows[:, 4]))
  return {"accuracy": accuracy(test), "train_accuracy": accuracy(train), "test_pairs": len(test),
          "train_pairs": len(train), "documents": len(cut), "ridge": float(ridge)}


def probe_run(run, params, split: str = "train", max_documents: int = 2000, seed: int = 0) -> dict:
  """same_document_probe of a run's `params` (a run with its vocabulary, e.g. pretrain.run.load's) on the first
  `max_documents` documents of its first source's `split`."""
  from pretrain.data import sources  # pylint: disable=g-import-not-at-top  (the data stack)
  if run.cfg.data.task:
    raise UserError(f"the probe reads the documents of data.source; a run of data.task={run.cfg.data.task!r} has "
                    "none it knows")
  source = sources.mixture_sources(run.cfg.data)[0][0]
  documents = [run.vocabulary.encode(text) for text in itertools.islice(source.texts(split), max_documents)]
  with run.activated():
    return same_document_probe(run.family, run.model, params, documents, seed)
