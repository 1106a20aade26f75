"""optimizer.schedule=wsd: warm-up, a constant stable phase, then a decay of each shape over the last steps; its
lengths checked with the config. (Resuming across its phases, and cooldown branches: tests/train/test_cooldown.py.)"""

import math

import pytest

from pretrain.system.errors import UserError
from pretrain.train import optimizer
from tests import numerics
from tests.conftest import tiny_config

PEAK, END = 0.01, 0.001  # learning_rate, and end_lr_ratio=0.1 of it
TERMS = 4  # A schedule's few float32 operations (a ratio, a root or cosine, a product, a sum), element by element.
WSD = ("--config.optimizer.schedule=wsd", f"--config.optimizer.learning_rate={PEAK}",
       "--config.optimizer.end_lr_ratio=0.1", "--config.optimizer.warmup_steps=10", "--config.train.steps=100")


def _rates(*args, at=(0, 5, 10, 79, 80, 85, 90, 100, 150)) -> dict[int, float]:
  cfg = tiny_config(*WSD, *args)
  lr = optimizer.schedule(cfg.optimizer, cfg.train.steps)
  return {t: float(lr(t)) for t in at}


# The rate a quarter into the decay (step 85 of the decay 80-100): what tells the shapes apart.
QUARTER = {"1-sqrt": END + (PEAK - END) * (1 - math.sqrt(0.25)), "linear": END + (PEAK - END) * 0.75,
           "cosine": END + (PEAK - END) * (1 + math.cos(math.pi / 4)) / 2}


@pytest.mark.parametrize("shape", sorted(QUARTER))
def test_wsd_at_its_phase_boundaries(shape):
  """0 at the start, the peak from the end of warm-up to the start of the decay, `end` at the run's last step."""
  rates = _rates("--config.optimizer.decay_steps=20", f"--config.optimizer.decay_shape={shape}")
  expected = {0: 0.0, 5: PEAK / 2, 10: PEAK, 79: PEAK, 80: PEAK, 85: QUARTER[shape], 90: (PEAK + END) / 2,
              100: END, 150: END}
  if shape == "1-sqrt":
    expected[90] = END + (PEAK - END) * (1 - math.sqrt(0.5))
  numerics.assert_close([rates[t] for t in expected], list(expected.values()), terms=TERMS)
  assert rates[80] == rates[79] == rates[10]  # Bit for bit: a cooldown branch's first update is its parent's.


def test_the_decay_is_a_fraction_of_the_run_unless_its_steps_are_given():
  by_fraction = _rates("--config.optimizer.decay_fraction=0.2")  # 20 of 100 steps
  assert by_fraction == _rates("--config.optimizer.decay_steps=20")
  numerics.assert_close(by_fraction[80], PEAK, terms=TERMS)
  assert by_fraction[85] < 0.99 * PEAK
  longer = _rates("--config.optimizer.decay_fraction=0.5", "--config.optimizer.decay_shape=linear")
  numerics.assert_close([longer[t] for t in (10, 79, 90, 100)],
                        [PEAK, PEAK - (PEAK - END) * 29 / 50, PEAK - (PEAK - END) * 40 / 50, END], terms=TERMS)
  # The given steps win over the fraction; without warm-up the run starts at the peak.
  assert _rates("--config.optimizer.decay_fraction=0.5", "--config.optimizer.decay_steps=20") == by_fraction
  numerics.assert_close(_rates("--config.optimizer.warmup_steps=0", "--config.optimizer.decay_steps=20", at=(0,))[0],
                        PEAK, terms=TERMS)


@pytest.mark.parametrize("args, message", [
    (["--config.optimizer.decay_steps=95"],
     "optimizer.schedule=wsd: optimizer.warmup_steps=10 of warm-up and optimizer.decay_steps=95 exceed "
     "train.steps=100; set --config.optimizer.decay_steps to at most 90, or raise train.steps"),
    (["--config.optimizer.decay_fraction=0.95"],
     "optimizer.warmup_steps=10 of warm-up and 95 (optimizer.decay_fraction=0.95) of decay exceed train.steps=100; "
     "set --config.optimizer.decay_steps to at most 90"),
    (["--config.optimizer.warmup_steps=100"], "lower --config.optimizer.warmup_steps below 100"),
    (["--config.optimizer.decay_fraction=0"], "optimizer.decay_fraction must be in (0, 1], got 0.0"),
    (["--config.optimizer.decay_shape=exponential"], "optimizer.decay_shape must be 1-sqrt | linear | cosine"),
    (["--config.optimizer.decay_steps=-1"], "optimizer.decay_steps must be at least 0, got -1"),
    (["--config.optimizer.schedule=cosine", "--config.optimizer.decay_steps=20"],
     "optimizer.decay_steps=20 set, but optimizer.schedule='cosine' does not read it (wsd's decay)"),
    (["--config.optimizer.schedule=rsqrt", "--config.optimizer.decay_shape=linear",
      "--config.optimizer.decay_fraction=0.5"],
     "optimizer.decay_fraction=0.5, optimizer.decay_shape='linear' set, but optimizer.schedule='rsqrt' does not "
     "read them"),
    (["--config.train.keep_steps=True"], "train.keep_steps must be steps (positive integers)"),
    (["--config.train.spike_guard=True", "--config.train.spike_test_batches=(True,)"],
     "train.spike_test_batches must be data batch indices"),
])
def test_a_decay_that_does_not_fit_is_refused_with_the_config(args, message):
  with pytest.raises(UserError) as raised:
    tiny_config(*WSD, *args)
  assert message in str(raised.value) and "\n" not in str(raised.value)
