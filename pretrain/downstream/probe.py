"""Linear probes of frozen representations, and the same-document probe.

A passage's representation is the mean of the model's final hidden states over
its PASSAGE_TOKENS tokens (Family.representations). The classifier is ridge
regression to one-hot targets (+1/-1) on standardised features, one column per
class and the largest column wins, its L2 weight chosen on held-out rows.

The same-document probe needs no hand labels: passages are cut from a source's
documents; half of the pairs are two passages of one document, half a passage
of it and one of another document, so chance is 0.5. A pair's features are
|a - b| and a * b (as in sentence-pair probes since InferSent). The probe is
fitted on the pairs of some documents and tested on the pairs of the others
(which ones: the seed), so the test accuracy is on documents the probe has not
seen, and by default on documents the model never trained on (the bundled
corpus's downstream split; else the validation split).
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np

from pretrain.system.errors import UserError

PASSAGE_TOKENS = 32
PAIRS_PER_DOCUMENT = 4   # Of each kind: same document, other document.
TEST_SHARE = 0.4         # Of the documents.
RIDGES = 10.0 ** np.arange(6)  # L2 weights on the standardised features, chosen among by cross-validation.
FOLDS = 4
BATCH = 64


def passages(documents: list[list[int]], minimum: int = 2) -> list[np.ndarray]:
  """Each document's consecutive passages [n, PASSAGE_TOKENS], for documents with at least `minimum`."""
  cut = []
  for tokens in documents:
    n = len(tokens) // PASSAGE_TOKENS
    if n >= minimum and n:
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


def representations(family, model, params, rows: np.ndarray) -> np.ndarray:
  """Mean final hidden state of each row of tokens [N, L] -> [N, D] (float32)."""

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


def fit_ridge(x: np.ndarray, y: np.ndarray, ridge: float, classes: int = 2):
  """A linear classifier of labels 0 .. classes - 1: ridge regression to one-hot targets (+1/-1) on standardised
  features. Returns a function of features to predicted labels (for two classes, the sign of one score)."""
  mean, std = x.mean(0), x.std(0) + 1e-6
  z = np.concatenate([(x - mean) / std, np.ones((len(x), 1))], axis=1)
  regulariser = ridge * np.eye(z.shape[1])
  regulariser[-1, -1] = 0  # Not the bias.
  w = np.linalg.solve(z.T @ z + regulariser, z.T @ (2.0 * np.eye(classes)[y] - 1))
  return lambda features: np.argmax(np.concatenate([(features - mean) / std, np.ones((len(features), 1))], 1) @ w,
                                    axis=1)


def choose_ridge(x: np.ndarray, y: np.ndarray, groups: np.ndarray, classes: int = 2) -> float:
  """The L2 weight of RIDGES with the best accuracy over FOLDS folds of the training rows, split by document
  (a row's `groups`) so that no document is on both sides of a fold."""
  fold = groups % FOLDS

  def accuracy(ridge):
    return np.mean([np.mean(fit_ridge(x[fold != k], y[fold != k], ridge, classes)(x[fold == k]) == y[fold == k])
                    for k in range(FOLDS)])

  return max(RIDGES, key=accuracy)


def same_document_probe(family, model, params, documents: list[list[int]], seeds=(0,)) -> list[dict]:
  """Per seed: the probe's train and test accuracy on `documents` (token ids) and how many pairs each side holds;
  the representations are computed once for all seeds."""
  cut = passages(documents)
  if len(cut) < 6:
    raise UserError(f"the probe needs at least 6 documents of {2 * PASSAGE_TOKENS} tokens or more; the "
                    f"documents given hold {len(cut)}")
  counts = [len(c) for c in cut]
  starts = np.cumsum([0] + counts)
  hidden = representations(family, model, params, np.concatenate(cut))
  embedded = [hidden[starts[d]:starts[d + 1]] for d in range(len(cut))]
  results = []
  for seed in seeds:
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(cut))
    test_documents, train_documents = np.split(order, [max(2, int(len(cut) * TEST_SHARE))])
    train, test = pairs(counts, train_documents, rng), pairs(counts, test_documents, rng)
    x, y = _features(embedded, train), train[:, 4]
    ridge = choose_ridge(x, y, train[:, 0])
    predict = fit_ridge(x, y, ridge)
    accuracy = lambda rows: float(np.mean(predict(_features(embedded, rows)) == rows[:, 4]))
    results.append({"accuracy": accuracy(test), "train_accuracy": accuracy(train), "test_pairs": len(test),
                    "train_pairs": len(train), "documents": len(cut), "ridge": float(ridge)})
  return results


def held_out_split(source) -> str:
  """The split of documents the model never trained on that a probe reads: the source's downstream split (the
  bundled corpus has one), else its validation split."""
  from pretrain.data import sources  # pylint: disable=g-import-not-at-top  (the data stack)
  return sources.DOWNSTREAM if sources.DOWNSTREAM in source.splits else sources.VALIDATION


def run_documents(run, split: str | None = None, max_documents: int = 2000) -> tuple[str, list[list[int]]]:
  """(split, the token ids of its first `max_documents` documents) of a run's first source; `split` None: the
  held-out one (held_out_split)."""
  from pretrain.data import sources  # pylint: disable=g-import-not-at-top  (data stack: not for generate)
  if run.cfg.data.task:
    raise UserError(f"the probe reads the documents of data.source; a run of data.task={run.cfg.data.task!r} has "
                    "none it knows")
  source = sources.mixture_sources(run.cfg.data)[0][0]
  split = split or held_out_split(source)
  if split not in source.splits:
    raise UserError(f"the source {source.name!r} has no split {split!r}; choose one of {', '.join(source.splits)}")
  texts = itertools.islice(source.texts(split), max_documents)
  return split, [run.vocabulary.encode(text) for text in texts]
