"""pretrain/data/packing.py packs exactly as seqio does, and the feature converters give the same model features
with either packing."""

import numpy as np
import pytest
import seqio
import tensorflow as tf

from pretrain.data import packing


def _examples(rng, count: int, keys: dict[str, int], longest: float = 1.5) -> tf.data.Dataset:
  """Examples of 0 to `longest` x length non-zero tokens per feature (longer ones are trimmed in packing)."""
  examples = [{k: rng.integers(1, 50, rng.integers(0, int(longest * n) + 1)).astype(np.int32) for k, n in keys.items()}
              for _ in range(count)]
  return tf.data.Dataset.from_generator(lambda: iter(examples),
                                        output_signature={k: tf.TensorSpec([None], tf.int32) for k in keys})


@pytest.mark.parametrize("lengths", [{"targets": 7}, {"inputs": 9, "targets": 4}, {"inputs": 3, "targets": 12}])
def test_the_same_rows_as_seqio(lengths):
  rng = np.random.default_rng(len(lengths) * 100 + sum(lengths.values()))
  for count in (1, 5, 12, 40):  # Across seqio's batches of max(lengths) examples.
    dataset = _examples(rng, count, lengths)
    expected = list(seqio.utils.trim_and_pack_dataset(dataset, lengths).as_numpy_iterator())
    ours = list(packing.trim_and_pack(dataset, lengths).as_numpy_iterator())
    assert len(ours) == len(expected)
    for a, b in zip(ours, expected):
      assert a.keys() == b.keys()
      for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.parametrize("converter", [lambda: seqio.LMFeatureConverter(pack=True),
                                       lambda: seqio.EncDecFeatureConverter(pack=True),
                                       lambda: seqio.PrefixLMFeatureConverter(pack=True, loss_on_targets_only=True)],
                         ids=["lm", "encdec", "prefix_lm"])
def test_converters_give_the_same_model_features(converter):
  lengths = {k: {"inputs": 16, "targets": 8}[k] for k in converter().TASK_FEATURES}
  dataset = _examples(np.random.default_rng(0), 30, lengths, longest=1.0)  # Converters refuse longer ones.
  expected = list(converter()(dataset, lengths).as_numpy_iterator())
  ours = list(packing.numpy_packing(converter())(dataset, lengths).as_numpy_iterator())
  assert len(ours) == len(expected) > 1
  for a, b in zip(ours, expected):
    assert a.keys() == b.keys()
    for k in a:
      np.testing.assert_array_equal(a[k], b[k], err_msg=k)
