import numpy as np
import pytest
import seqio
import tensorflow as tf

from pretrain import families as family, objectives
from pretrain.data import replay, tasks
from pretrain.objectives import common
from pretrain.vocab import pipeline as vocab

CLM = objectives.make("clm", None, seed=0)


def test_split_to_length_keeps_every_token():
  tokens = np.arange(1, 24, dtype=np.int32)
  dataset = tf.data.Dataset.from_tensors({"targets": tokens})
  pieces = [p["targets"].tolist() for p in common.split_to_length(dataset, 5).as_numpy_iterator()]
  assert [len(p) for p in pieces] == [5, 5, 5, 5, 3]
  assert sum(pieces, []) == tokens.tolist()


def test_task_targets_are_documents_with_eos(corpus_source, vocabulary):
  name = tasks.register(corpus_source, vocabulary, CLM)
  task = seqio.get_mixture_or_task(name)
  examples = task.get_dataset({"targets": 64}, split="validation", shuffle=False).as_numpy_iterator()
  pieces = [ex["targets"].tolist() for ex in examples]
  assert all(1 <= len(p) <= 64 for p in pieces)
  # Concatenated, the pieces are exactly the validation documents, each followed by EOS.
  # Compared as text: the TF and Python tokenizers may break ties between equal-score pieces differently.
  tokens = sum(pieces, [])
  assert tokens[-1] == vocab.EOS_ID
  documents, start = [], 0
  for end in [i for i, t in enumerate(tokens) if t == vocab.EOS_ID]:
    documents.append(vocabulary.decode(tokens[start:end]))
    start = end + 1
  assert documents == list(corpus_source.texts("validation"))


def test_packed_batches(corpus_source, vocabulary):
  name = tasks.register(corpus_source, vocabulary, CLM)
  rows, length = 4, 512  # Longer than most documents, so rows hold several.
  batch = next(replay.batches(name, "train", {"targets": length}, rows, family.CAUSAL_LM, shuffle=True, seed=3, repeat=True))
  targets, inputs = batch["decoder_target_tokens"], batch["decoder_input_tokens"]
  segments, positions = batch["decoder_segment_ids"], batch["decoder_positions"]
  weights = batch["decoder_loss_weights"]
  assert targets.shape == (rows, length)
  assert (segments.max(axis=1) > 1).any(), "several examples are packed into a row"
  for row in range(rows):
    for pos in range(length):
      seg = segments[row, pos]
      if seg == 0:  # Padding: no loss, no token.
        assert weights[row, pos] == 0 and targets[row, pos] == 0
        continue
      assert weights[row, pos] == 1
      starts_segment = pos == 0 or segments[row, pos - 1] != seg
      assert positions[row, pos] == (0 if starts_segment else positions[row, pos - 1] + 1)
      # Inputs are the targets shifted right within the segment, starting with 0.
      assert inputs[row, pos] == (0 if starts_segment else targets[row, pos - 1])
    assert (np.diff(segments[row][segments[row] > 0]) >= 0).all()


@pytest.mark.slow
def test_same_seed_same_batches(corpus_source, vocabulary):
  name = tasks.register(corpus_source, vocabulary, CLM)
  first = [next(replay.batches(name, "train", {"targets": 32}, 4, family.CAUSAL_LM, shuffle=True, seed=7, repeat=True)) for _ in range(2)]
  np.testing.assert_array_equal(first[0]["decoder_target_tokens"], first[1]["decoder_target_tokens"])
  batches = lambda size, skip=0: replay.batches(name, "train", {"targets": 32}, size, family.CAUSAL_LM, shuffle=True, seed=7,
                                                  repeat=True, skip_examples=skip)
  uninterrupted = batches(4)
  seen = [next(uninterrupted)["decoder_target_tokens"] for _ in range(4)]
  np.testing.assert_array_equal(next(batches(4, skip=8))["decoder_target_tokens"], seen[2])
  # Resumed with another batch size after 8 examples: the same examples follow.
  np.testing.assert_array_equal(next(batches(8, skip=8))["decoder_target_tokens"], np.concatenate(seen[2:]))


def _stream_objective():
  import ml_collections  # pylint: disable=g-import-not-at-top
  return objectives.make("clm", ml_collections.ConfigDict({"context": "stream"}), seed=0)


def test_a_stream_context_is_the_documents_in_order_cut_into_full_rows(corpus_source, vocabulary):
  """data.context=stream: the split's documents, each with its EOS, in their order, cut into rows of exactly the
  target length (the last one shorter): no token lost or repeated, and a row runs across documents."""
  stream = _stream_objective()
  assert stream.in_order and not CLM.in_order
  task = seqio.get_mixture_or_task(tasks.register(corpus_source, vocabulary, stream))
  rows = [ex["targets"].tolist() for ex in task.get_dataset({"targets": 64}, split="validation", shuffle=False)
          .as_numpy_iterator()]
  assert all(len(r) == 64 for r in rows[:-1]) and 1 <= len(rows[-1]) <= 64
  documents = [ex["targets"].tolist() for ex in seqio.get_mixture_or_task(tasks.register(
      corpus_source, vocabulary, CLM)).get_dataset({"targets": 100_000}, split="validation", shuffle=False)
      .as_numpy_iterator()]
  assert sum(rows, []) == sum(documents, [])  # The document pieces with their EOS, in order.
  assert sum(vocab.EOS_ID in r[:-1] for r in rows) > len(rows) // 4  # Rows that go on past a document's end.


def test_stream_rows_have_one_segment_and_packed_rows_several(corpus_source, vocabulary):
  """The mask follows the segments: in a stream row every token has segment 1 and positions 0..L-1, so the token
  after a document's EOS attends to that document; in packed rows it starts a segment of its own."""
  length = 64
  for objective, stream in ((_stream_objective(), True), (CLM, False)):
    name = tasks.register(corpus_source, vocabulary, objective)
    batch = next(replay.batches(name, "train", {"targets": length}, 256, family.CAUSAL_LM, shuffle=True,
                                seed=0, repeat=True))
    targets, segments, positions = (batch[k] for k in ("decoder_target_tokens", "decoder_segment_ids",
                                                       "decoder_positions"))
    rows, ends = np.nonzero((targets[:, :-1] == vocab.EOS_ID) & (segments[:, 1:] > 0))
    assert len(rows) >= 3, "documents end inside rows"
    assert (segments[rows, ends + 1] == segments[rows, ends]).all() == stream
    assert (positions[rows, ends + 1] == ends + 1).all() == stream
    if stream:
      assert (segments == 1).all() and (positions == np.arange(length)).all()
