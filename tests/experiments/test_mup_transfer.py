"""`pretrain experiment mup_transfer`: its verdicts."""

import pytest

from pretrain.experiments import mup_transfer


@pytest.mark.slow
def test_mup_transfer_says_a_shift_held_back_by_holm_is_not_shown_rather_than_absent():
  """An optimum that moves by its own interval but not after Holm's correction over the page's list is not
  reported as 'does not move'; one whose spread hides it names the smallest shift the seeds could find."""
  lrs = [2.0 ** -10, 2.0 ** -8, 2.0 ** -6, 2.0 ** -4]
  optima = {("decoder_only", "standard"): ([-8, -8, -8.1], [-8.2, -8.45, -8.3]),  # p 0.043: apart alone.
            ("decoder_only", "mup"): ([-8, -6, -8], [-6, -8, -8])}  # Hidden in the spread.
  rows = [{"family": family, "parameterization": parameterization, "width": width, "optima": values}
          for (family, parameterization), ends in optima.items() for width, values in zip((64, 256), ends)]
  standard, mup = mup_transfer.shifts(rows, [64, 256], lrs)
  assert "apart by its own interval, not after Holm's correction: not shown to differ." in standard
  assert "not shown to differ (at this spread the seeds detect only differences of" in mup
  assert "does not move" not in standard + mup
