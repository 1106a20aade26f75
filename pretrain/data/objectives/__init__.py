"""Pre-training objectives as seqio preprocessors: pure tf.data functions of the
tokenized documents and a seed.

Each objective names its model family (pretrain/family.py), which says what
features its examples hold and how they are packed for the model.
"""

import dataclasses
import functools
from typing import Callable

from pretrain import family as families
from pretrain.data.objectives import bart, clm, fim, mlm, prefix_lm, span_corruption, ul2
from pretrain.errors import UserError


@dataclasses.dataclass(frozen=True)
class Objective:
  name: str
  preprocess: Callable    # (dataset, sequence_length, output_features) -> dataset, after tokenization
  family: families.Family


NAMES = ("clm", "span_corruption", "prefix_lm", "prefix_lm_decoder", "ul2", "ul2_decoder", "mlm", "fim", "bart")


def make(name: str, data_cfg, seed: int) -> Objective:
  """The objective `name` with its parameters from the `data` config."""
  if name == "clm":
    return Objective(name, clm.clm, families.CAUSAL_LM)
  if name == "span_corruption":
    spec = span_corruption.SpanCorruption(data_cfg.noise_density, data_cfg.mean_noise_span_length)
    spec.check()
    return Objective(name, functools.partial(span_corruption.span_corruption, spec=spec, seed=seed), families.ENCODER_DECODER)
  if name == "mlm":
    return Objective(name, functools.partial(mlm.mlm, seed=seed, rate=data_cfg.mlm_rate), families.ENCODER_ONLY)
  if name == "fim":
    return Objective(name, functools.partial(fim.fim, seed=seed, rate=data_cfg.fim_rate,
                                             spm_rate=data_cfg.fim_spm_rate), families.CAUSAL_LM)
  if name == "bart":
    spec = bart.BartNoise(data_cfg.bart_permute_sentences, data_cfg.bart_rotate, data_cfg.bart_mask_rate,
                          data_cfg.bart_delete_rate, data_cfg.bart_infilling_rate)
    spec.check()
    return Objective(name, functools.partial(bart.bart, spec=spec, seed=seed), families.ENCODER_DECODER)
  decoder = name.endswith("_decoder")
  family = families.PREFIX_LM if decoder else families.ENCODER_DECODER
  if name.startswith("prefix_lm"):
    return Objective(name, functools.partial(prefix_lm.prefix_lm, seed=seed, decoder=decoder), family)
  if name.startswith("ul2"):
    denoisers = ul2.parse_denoisers(data_cfg.ul2_denoisers)
    return Objective(name, functools.partial(ul2.ul2, denoisers=denoisers, seed=seed, decoder=decoder), family)
  raise UserError(f"unknown objective {name!r}; choose one of {', '.join(NAMES)}")
