"""T5 span corruption: exact counts, sentinels and reconstruction, as properties."""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings, strategies as st

from pretrain.objectives.span_corruption import SpanCorruption
from pretrain.objectives.span_corruption import check_lengths
from pretrain.objectives.span_corruption import corrupt
from pretrain.objectives.span_corruption import lengths_of
from pretrain.objectives.span_corruption import random_spans_helper
from pretrain.objectives.span_corruption import random_spans_noise_mask
from pretrain.system.errors import UserError

# Far above the test's token ids, so that even 4096 spans never reach them.
FIRST_SENTINEL = 1_000_000
SENTINELS_FROM = FIRST_SENTINEL - 5000
densities = st.floats(min_value=0.01, max_value=0.99)
means = st.integers(min_value=1, max_value=64)


def _expected_counts(length, density, mean):
  """T5's counts, in float32 as the TF code computes them."""
  noise = int(np.round(np.float32(length) * np.float32(density)))
  noise = min(max(noise, 1), length - 1)
  spans = max(int(np.round(np.float32(noise) / np.float32(mean))), 1)
  return noise, min(spans, length - noise)  # No more spans than non-noise tokens (T5 fails there).


def _runs(mask):
  """Lengths of the runs of equal values in a boolean array, with their values."""
  changes = np.flatnonzero(np.diff(mask.astype(np.int8))) + 1
  bounds = np.concatenate([[0], changes, [len(mask)]])
  return [(bool(mask[a]), b - a) for a, b in zip(bounds[:-1], bounds[1:])]


@settings(max_examples=60, deadline=None)
@given(length=st.integers(2, 4096), density=densities, mean=means, seed=st.integers(0, 2**31 - 1))
def test_noise_mask_counts(length, density, mean, seed):
  spec = SpanCorruption(density, float(mean))
  seeds = tf.random.experimental.stateless_split(tf.constant([seed, 7], tf.int64), 2)
  mask = random_spans_noise_mask(tf.constant(length), spec, seeds).numpy()
  noise, spans = _expected_counts(length, density, mean)
  assert mask.shape == (length,)
  assert mask.sum() == noise
  runs = _runs(mask)
  assert [value for value, _ in runs] == [False, True] * spans  # Starts with non-noise, ends with noise.


@settings(max_examples=60, deadline=None)
@given(length=st.integers(2, 4096), density=densities, mean=means, seed=st.integers(0, 2**31 - 1))
def test_sentinels_and_reconstruction(length, density, mean, seed):
  rng = np.random.default_rng(seed)
  tokens = rng.integers(3, 1000, length).astype(np.int32)
  out = corrupt(tf.constant(tokens), SpanCorruption(density, float(mean)), tf.constant([seed, 3], tf.int64),
                FIRST_SENTINEL)
  inputs, targets = out["inputs"].numpy(), out["targets"].numpy()
  _, spans = _expected_counts(length, density, mean)
  input_sentinels = inputs[inputs >= SENTINELS_FROM]
  target_sentinels = targets[targets >= SENTINELS_FROM]
  expected = FIRST_SENTINEL - np.arange(spans)
  np.testing.assert_array_equal(input_sentinels, expected)  # Descending from <extra_id_0>.
  np.testing.assert_array_equal(target_sentinels, expected)
  assert targets[0] == FIRST_SENTINEL
  # Each sentinel in the inputs, replaced by the tokens that follow it in the targets, gives the segment back.
  span_of, current = {}, None
  for t in targets:
    if t >= SENTINELS_FROM:
      current = t
      span_of[current] = []
    else:
      span_of[current].append(t)
  rebuilt = []
  for t in inputs:
    rebuilt.extend(span_of[t] if t >= SENTINELS_FROM else [t])
  np.testing.assert_array_equal(rebuilt, tokens)


def test_length_helper_matches_t5():
  assert random_spans_helper(512, SpanCorruption(0.15, 3.0)) == (568, 114)
  assert random_spans_helper(512, SpanCorruption(0.5, 3.0))[1] == 512  # Density 0.5: targets = inputs.


@settings(max_examples=100, deadline=None)
@given(inputs_length=st.integers(8, 2048), density=densities, mean=means)
def test_length_helper_fills_the_inputs(inputs_length, density, mean):
  spec = SpanCorruption(density, float(mean))
  segment, targets = random_spans_helper(inputs_length, spec)
  inputs_used, targets_needed, _ = lengths_of(segment, spec)
  assert inputs_used <= inputs_length and targets_needed <= max(targets, inputs_length)
  if density != 0.5:
    assert targets == targets_needed
    assert lengths_of(segment + 1, spec)[0] > inputs_length


@pytest.mark.parametrize("spec, inputs, targets, message", [
    (SpanCorruption(1.5, 3.0), 512, 512, "noise_density must be in \\(0, 1\\)"),
    (SpanCorruption(0.0, 3.0), 512, 512, "noise_density must be in \\(0, 1\\)"),
    (SpanCorruption(0.15, 0.5), 512, 512, "mean_noise_span_length must be at least 1"),
    (SpanCorruption(0.15, 3.0), 512, 100, "needs targets_length >= 114"),
    (SpanCorruption(0.5, 3.0), 512, 512, "makes up to 128 spans, but the vocabulary has 100 sentinels"),
    (SpanCorruption(0.15, 3.0), 1, 10, "too short"),
])
def test_bad_parameters_are_named(spec, inputs, targets, message):
  with pytest.raises(UserError, match=message):
    check_lengths(spec, inputs, targets, num_sentinels=100)


@pytest.mark.parametrize("inputs_length", [16, 101, 512])
def test_task_examples_fit_their_lengths_exactly(corpus_source, vocabulary, inputs_length):
  """Segments are sized so that nothing is ever trimmed by packing, and the inputs are filled."""
  import seqio  # pylint: disable=g-import-not-at-top
  from pretrain import configs, objectives  # pylint: disable=g-import-not-at-top
  from pretrain.data import tasks  # pylint: disable=g-import-not-at-top

  data_cfg = configs.load("quickstart").data
  name = tasks.register(corpus_source, vocabulary, objectives.make("span_corruption", data_cfg, seed=0))
  segment_length, targets_length = random_spans_helper(inputs_length, SpanCorruption())
  filled = lengths_of(segment_length, SpanCorruption())[0]
  dataset = seqio.get_mixture_or_task(name).get_dataset(
      {"inputs": inputs_length, "targets": targets_length}, split="validation", shuffle=False, seed=0)
  examples = list(dataset.as_numpy_iterator())
  assert all(len(ex["inputs"]) <= inputs_length and len(ex["targets"]) <= targets_length for ex in examples)
  # Only the last segment of each group of concatenated documents is shorter.
  assert sum(len(ex["inputs"]) == filled for ex in examples) >= 0.9 * len(examples)


UL2_SPECS = [SpanCorruption(density, float(mean)) for mean, density in ((3, 0.15), (8, 0.15), (3, 0.5), (8, 0.5),
                                                                          (64, 0.15), (64, 0.5))]


@pytest.mark.parametrize("spec", [SpanCorruption(), *UL2_SPECS], ids=SpanCorruption.describe)
def test_length_helper_counts_what_the_mask_makes_at_every_length(spec):
  """lengths_of is the mask's count (test_noise_mask_counts checks that count against the mask) at every
  segment length, grows with it, and the helper's segment fills but never exceeds the inputs, with a mode
  token (UL2) or without; shorter segments (the last of a stream) then fit too."""
  counted = {}
  for length in range(2, 4200):
    noise, spans = _expected_counts(length, spec.noise_density, spec.mean_noise_span_length)
    counted[length] = (length - noise + spans + 1, noise + spans + 1, spans)
    assert lengths_of(length, spec) == counted[length]
    if length > 2:
      assert counted[length][0] >= counted[length - 1][0] and counted[length][1] >= counted[length - 1][1]
  for reserved in (0, 1):
    for inputs_length in range(4, 2049):
      segment, targets = random_spans_helper(inputs_length - reserved, spec)
      if segment < 2:
        continue  # check_lengths refuses it.
      assert counted[segment][0] + reserved <= inputs_length
      assert counted[segment][1] <= targets or (spec.noise_density == 0.5 and counted[segment][1] <= inputs_length)


def test_at_least_one_span_keeps_the_eos():
  """UL2's X-denoiser (mean 64, density 0.15) at inputs 128: round(19 / 64) = 0 spans by T5's count, one made."""
  spec = SpanCorruption(0.15, 64.0)
  segment, _ = random_spans_helper(127, spec)
  assert lengths_of(segment, spec)[0] == 127 and lengths_of(segment, spec)[2] == 1
