"""BERT's next-sentence prediction (NSP) and ALBERT's sentence-order prediction
(SOP): MLM examples of two segments and a label saying whether the second
continues the first.

Sentences end after a token whose piece ends in '.', '!' or '?' (closing quotes
and brackets after it aside). As BERT's create_pretraining_data, simplified:
each document's consecutive sentences are gathered into chunks of about the
example's length; a chunk of two sentences or more is split at a random
sentence boundary into A and B. Half the pairs are positives (label 1: B follows
A in the document); the other half are negatives (label 0): for NSP, B is
replaced by consecutive sentences from a random place in another document of
the group; for SOP, A and B swap places. The longer segment is then cut at its
end until the pair fits. The example is `A EOS B EOS`, MLM-masked except at the
two separators.
"""

import hashlib
import itertools

import numpy as np
import tensorflow as tf

from pretrain.data import vocab
from pretrain.data.objectives import common, mlm
from pretrain.errors import UserError

KINDS = ("nsp", "sop")
SENTENCE_ENDS = (".", "!", "?")
# Stripped from a piece's end before looking for a sentence end: '."', '.)' and '.\n' end sentences too.
_CLOSING = "\"')]}\u201d\u2019\u00bb \n\t\u2581"


def _check_kind(kind: str) -> None:
  if kind not in KINDS:
    raise UserError(f"sentence pairs are built for data.objective nsp or sop, got {kind!r}; use one of those")


def terminal_ids(vocabulary) -> np.ndarray:
  """Per id, whether its piece ends a sentence. Byte pieces count as their character (the vocabulary spells a
  rare '?' as the byte <0x3F>); sentinels never end one."""
  tokenizer = vocabulary.tokenizer
  table = np.zeros(vocabulary.vocab_size, bool)
  for i in range(min(tokenizer.get_piece_size(), vocabulary.vocab_size)):
    piece = tokenizer.id_to_piece(i)
    if tokenizer.is_byte(i):
      piece = chr(int(piece[3:-1], 16))
    table[i] = piece.rstrip(_CLOSING).endswith(SENTENCE_ENDS)
  return table


def sentences(tokens: np.ndarray, is_terminal, max_tokens: int) -> list[np.ndarray]:
  """The consecutive sentences of `tokens`, a longer one than `max_tokens` cut into pieces of at most that many."""
  ends = np.flatnonzero(is_terminal[tokens]) + 1
  result = []
  for sentence in np.split(tokens, ends[ends < len(tokens)]):
    result.extend(sentence[i:i + max_tokens] for i in range(0, len(sentence), max_tokens))
  return result


def _truncate(a: np.ndarray, b: np.ndarray, budget: int) -> tuple[np.ndarray, np.ndarray]:
  """Cuts the longer segment at its end until the two fit `budget` (BERT's truncate_seq_pair, always from the
  end)."""
  while len(a) + len(b) > budget:
    if len(a) > len(b):
      a = a[:-1]
    else:
      b = b[:-1]
  return a, b


def _span(document_sentences: list[np.ndarray], tokens: int) -> np.ndarray:
  """The first sentences, as many as reach `tokens` tokens (or all)."""
  taken, size = [], 0
  for sentence in document_sentences:
    taken.append(sentence)
    size += len(sentence)
    if size >= tokens:
      break
  return np.concatenate(taken)


def build_pairs(documents: list[np.ndarray], kind: str, length: int, is_terminal,
                rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray, int]]:
  """(A, B, label) pairs from tokenized documents, len(A) + len(B) + 2 <= `length` (room for two separators).

  Label 1: B continues A in its document. A chunk of one sentence left at a document's end is dropped, as BERT
  drops it, and a document of one sentence gives no pair (its sentences may still be NSP negatives). With a single
  document (no other one holding a sentence), NSP has nowhere to draw a negative from: its pairs stay positive.
  """
  _check_kind(kind)
  budget = length - 2
  split = [sentences(d, is_terminal, budget // 2) for d in documents]
  with_sentences = [j for j, document in enumerate(split) if document]
  pairs = []
  for position, index in enumerate(with_sentences):
    document = split[index]
    chunk, size = [], 0
    for i, sentence in enumerate(document):
      chunk.append(sentence)
      size += len(sentence)
      if size < budget and i < len(document) - 1:
        continue
      if len(chunk) >= 2:
        a_end = rng.integers(1, len(chunk))
        a, b, label = np.concatenate(chunk[:a_end]), np.concatenate(chunk[a_end:]), 1
        if rng.random() < 0.5:
          if kind == "sop":
            a, b, label = b, a, 0
          elif len(with_sentences) > 1:  # NSP: B from another document.
            k = rng.integers(len(with_sentences) - 1)
            other = split[with_sentences[k + (k >= position)]]
            b, label = _span(other[rng.integers(len(other)):], budget - len(a)), 0
        pairs.append((*_truncate(a, b, budget), label))
      chunk, size = [], 0
  return pairs


def _group_pairs(group: np.ndarray, seed: int, kind: str, length: int, is_terminal):
  """build_pairs of a padded batch of documents as flat arrays for tf.numpy_function: A's tokens and lengths,
  B's tokens and lengths, the labels. The draws depend on the seed and the documents only."""
  group = group.astype(np.int32)
  digest = hashlib.sha256(np.int64(seed).tobytes() + np.array(group.shape, np.int64).tobytes() + group.tobytes())
  rng = np.random.default_rng(int.from_bytes(digest.digest()[:16], "little"))
  pairs = build_pairs([row[row != 0] for row in group], kind, length, is_terminal, rng)
  a, b, labels = zip(*pairs) if pairs else ((), (), ())

  def flat(segments):
    return np.concatenate([np.zeros([0], np.int32), *segments]).astype(np.int32)

  def lengths(segments):
    return np.array([len(s) for s in segments], np.int64)

  return flat(a), lengths(a), flat(b), lengths(b), np.array(labels, np.int32)


def sentence_pairs(dataset, sequence_length, output_features, *, seed: int, kind: str, rate: float = 0.15):
  """seqio preprocessor: documents of 'targets' tokens -> {'inputs', 'targets', 'weights', 'pair_label'}, pairs
  of segments of at most the inputs length drawn within groups of 128 documents."""
  _check_kind(kind)
  vocabulary = output_features["targets"].vocabulary
  length = sequence_length["inputs"]
  if length < 4:
    raise UserError(f"inputs_length={length} is too short for sentence pairs; give at least 4 (two tokens and "
                    "two separators), a few hundred in practice")
  is_terminal = terminal_ids(vocabulary)
  mask_id = vocab.single_piece_id(vocabulary, vocab.MASK_TOKEN)
  random_ids = (mlm.first_regular_id(), vocabulary.vocab_size - vocabulary.extra_ids)
  eos = vocabulary.eos_id

  def to_pairs(group):
    out = tf.numpy_function(lambda g: _group_pairs(g, seed, kind, length, is_terminal), [group["targets"]],
                            [tf.int32, tf.int64, tf.int32, tf.int64, tf.int32], stateful=False)
    for tensor in out:
      tensor.set_shape([None])
    a, a_lengths, b, b_lengths, labels = out
    return tf.data.Dataset.from_tensor_slices({"a": tf.RaggedTensor.from_row_lengths(a, a_lengths),
                                               "b": tf.RaggedTensor.from_row_lengths(b, b_lengths),
                                               "label": labels})

  def make(pair):
    targets = tf.concat([pair["a"], [eos], pair["b"], [eos]], 0)
    positions = tf.range(tf.size(targets))
    candidates = (positions != tf.size(pair["a"])) & (positions != tf.size(targets) - 1)
    example = mlm.mask_tokens(targets, common.example_seed(targets, seed), rate=rate, mask_id=mask_id,
                              random_ids=random_ids, candidates=candidates)
    for name in ("inputs", "targets", "weights"):
      example[name].set_shape([None])
    example["pair_label"] = tf.reshape(pair["label"], [1])
    return example

  dataset = dataset.map(lambda ex: {"targets": ex["targets"]})
  # The groups of common.concatenate. Padding is id 0, which no text token has.
  dataset = dataset.padded_batch(128, padded_shapes={"targets": [-1]}).flat_map(to_pairs)
  return dataset.map(make, num_parallel_calls=tf.data.AUTOTUNE)


def check_documents(token_documents, is_terminal, kind: str) -> None:
  """Raises a UserError when no document holds two sentences: such a source gives no pair at all."""
  token_documents = list(token_documents)
  if not any(len(sentences(np.asarray(d), is_terminal, max(len(d), 1))) >= 2 for d in token_documents):
    raise UserError(f"data.objective={kind} builds sentence pairs, but none of the first {len(token_documents)} "
                    "documents of the source holds two sentences (ending in . ! or ?); use a source of "
                    "multi-sentence documents, or data.objective=mlm")


def check_source(source, vocabulary, kind: str, documents: int = 200) -> None:
  """check_documents on the first `documents` training documents of a source (pretrain.data.sources.Source)."""
  texts = itertools.islice(source.texts("train"), documents)
  check_documents([np.asarray(vocabulary.encode(t), np.int32) for t in texts], terminal_ids(vocabulary), kind)
