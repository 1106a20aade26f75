"""MASS: each segment's inputs hide one fragment of round(m * fraction) consecutive tokens behind [MASK]s, the
targets are that fragment, and inputs and targets together give back the documents' stream, token for token."""

import numpy as np
import pytest
import seqio
import tensorflow as tf

from pretrain import objectives
from pretrain.objectives import mass, mlm
from pretrain.system.errors import UserError
from tests.conftest import tiny_config


def _examples(vocabulary, documents, lengths, fraction=0.5, seed=0):
  data_cfg = tiny_config("--config.data.objective=mass", f"--config.data.mass_fraction={fraction}").data
  features = {k: seqio.Feature(vocabulary) for k in ("inputs", "targets")}
  dataset = tf.data.Dataset.from_tensor_slices({"targets": tf.ragged.constant(documents, dtype=tf.int32)})
  return list(objectives.make("mass", data_cfg, seed).preprocess(dataset, lengths, features).as_numpy_iterator())


@pytest.mark.parametrize("fraction", [0.15, 0.5, 0.8])
def test_the_fragment_is_masked_and_the_stream_comes_back(vocabulary, fraction):
  rng = np.random.default_rng(0)
  documents = [rng.integers(10, 4000, rng.integers(1, 90)).tolist() for _ in range(40)]
  lengths = {"inputs": 48, "targets": 30}
  segment = mass.segment_length(lengths, fraction)
  mask_id = vocabulary.tokenizer.piece_to_id(mlm.MASK_TOKEN)
  examples = _examples(vocabulary, documents, lengths, fraction)
  restored = []
  for example in examples:
    inputs, targets = example["inputs"][:-1].copy(), example["targets"][:-1]
    assert example["inputs"][-1] == example["targets"][-1] == vocabulary.eos_id
    assert len(inputs) <= segment and len(example["targets"]) <= lengths["targets"]
    masked = np.flatnonzero(inputs == mask_id)
    assert len(masked) == mass.fragment_length(len(inputs), fraction) == len(targets)
    assert (np.diff(masked) == 1).all()  # One fragment of consecutive tokens.
    inputs[masked] = targets
    restored.extend(inputs.tolist())
  assert restored == [t for d in documents for t in d]
  assert all(len(e["inputs"]) == segment + 1 for e in examples[:-1])  # Every segment but the last is full.
  again = _examples(vocabulary, documents, lengths, fraction)
  assert all((a["inputs"] == b["inputs"]).all() for a, b in zip(examples, again))  # A function of the seed.


def test_lengths_that_hold_no_fragment_are_refused_with_the_config():
  assert mass.segment_length({"inputs": 512, "targets": 114}, 0.5) == 226
  with pytest.raises(UserError, match="hold no MASS segment at data.mass_fraction=0.5: the targets must hold"):
    tiny_config("--config.data.objective=mass", "--config.data.targets_length=1")
