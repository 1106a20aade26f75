"""`pretrain experiment mup_transfer`: its verdicts."""

import argparse

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


def test_mup_transfer_page_names_its_own_command():
  """The page's command line is `pretrain experiment mup_transfer FLAGS`, whatever prog the parser was given (it
  once wrote 'pretrain experiment pretrain experiment mup_transfer')."""
  widths, lrs, seeds = [64, 128], [1e-3, 3e-3, 1e-2], [0, 1]
  loss = {1e-3: 5.0, 3e-3: 4.0, 1e-2: 4.5}
  results = {("decoder_only", p): {w: {lr: {s: loss[lr] + 0.01 * s + 0.001 * w for s in seeds} for lr in lrs}
                                   for w in widths} for p in mup_transfer.PARAMETERIZATIONS}
  rows = mup_transfer.analyse(results, widths, lrs, seeds)
  argv = ["--widths=64,128", "--seeds=0,1", "--families=decoder_only"]
  args = argparse.Namespace(steps=150, batch_size=16, seq_len=64, out="docs/mup_transfer")
  text = mup_transfer.page(rows, widths, lrs, seeds, ["pretrain sweep ..."], args, argv, "a machine")
  assert "\n    pretrain experiment mup_transfer --widths=64,128 --seeds=0,1 --families=decoder_only\n" in text
  assert text.count("| decoder_only |") == 4 and "![learning rate against loss per width](mup_transfer.png)" in text
