"""Pre-training objectives as seqio preprocessors: pure tf.data functions of the
tokenized documents and a seed.

Each objective names its model family (pretrain/family.py), which says what
features its examples hold and how they are packed for the model.
"""

import dataclasses
import functools
from typing import Callable

from pretrain import family as families
from pretrain.data.objectives import (bart, clm, contrastive, fim, mlm, prefix_lm, sentence_pairs, span_corruption,
                                      ul2)


@dataclasses.dataclass(frozen=True)
class Objective:
  name: str
  preprocess: Callable    # (dataset, sequence_length, output_features) -> dataset, after tokenization
  family: families.Family
  check_source: Callable | None = None  # (source, vocabulary): refuses a source the objective cannot use


NAMES = tuple(families.OF_OBJECTIVE)


def make(name: str, data_cfg, seed: int) -> Objective:
  """The objective `name` with its parameters from the `data` config."""
  family = families.of_objective(name)
  if name in ("clm", "fim"):
    preprocess = clm.clm if name == "clm" else functools.partial(fim.fim, seed=seed, rate=data_cfg.fim_rate,
                                                                  spm_rate=data_cfg.fim_spm_rate)
  elif name == "span_corruption":
    spec = span_corruption.SpanCorruption(data_cfg.noise_density, data_cfg.mean_noise_span_length)
    spec.check()
    preprocess = functools.partial(span_corruption.span_corruption, spec=spec, seed=seed)
  elif name in ("mlm", "electra"):  # ELECTRA's generator and discriminator read MLM's examples.
    preprocess = functools.partial(mlm.mlm, seed=seed, rate=data_cfg.mlm_rate)
  elif name in ("nsp", "sop"):
    preprocess = functools.partial(sentence_pairs.sentence_pairs, seed=seed, kind=name, rate=data_cfg.mlm_rate)
    return Objective(name, preprocess, family, functools.partial(sentence_pairs.check_source, kind=name))
  elif name == "contrastive":
    preprocess = contrastive.contrastive
  elif name == "bart":
    spec = bart.BartNoise(data_cfg.bart_permute_sentences, data_cfg.bart_rotate, data_cfg.bart_mask_rate,
                          data_cfg.bart_delete_rate, data_cfg.bart_infilling_rate)
    spec.check()
    preprocess = functools.partial(bart.bart, spec=spec, seed=seed)
  elif name.startswith("prefix_lm"):
    preprocess = functools.partial(prefix_lm.prefix_lm, seed=seed, decoder=name.endswith("_decoder"))
  else:  # ul2, ul2_decoder
    preprocess = functools.partial(ul2.ul2, denoisers=ul2.parse_denoisers(data_cfg.ul2_denoisers), seed=seed,
                                   decoder=name.endswith("_decoder"))
  return Objective(name, preprocess, family)
