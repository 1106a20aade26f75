"""`pretrain experiment compare_moe`: its runs' configs and flags."""

import argparse

import jax
import pytest

from pretrain import cli, run as run_lib
from pretrain.experiments import compare_moe
from pretrain.train import flops


@pytest.mark.slow
def test_compare_moe_gives_both_models_the_same_active_parameters_and_refuses_bad_flags(capsys):
  """Its runs' configs (the training itself is the other experiments' and test_moe.py's): the dense model and its
  MoE twin multiply the same parameters per token, the MoE holding more."""
  base = cli.parse_command_line(argparse.ArgumentParser(), ["--config=configs/quickstart.py"])[1]
  args = argparse.Namespace(seq_len=64, steps=3, batch_size=4, evals=3, d_model=32, num_layers=1, head_dim=16,
                            experts=8, top_k=2)
  for family in compare_moe.FAMILIES:
    counts = {}
    for model in compare_moe.MODELS:
      cfg = compare_moe.run_config(base, family, model, args)
      params = run_lib.Run.build(cfg, 128).abstract_state().params
      counts[model] = (flops.active_parameters(params, cfg.model), sum(x.size for x in jax.tree.leaves(params)))
    router = 32 * 8 * (1 if family == "decoder_only" else 2)  # d_model x experts, per MoE layer
    assert counts["moe"][0] - counts["dense"][0] == router and counts["moe"][1] > counts["dense"][1]
  with pytest.raises(SystemExit):
    compare_moe.main(["--experts=2", "--top_k=3"])
  assert "--top_k=3 is more than --experts=2" in capsys.readouterr().err
