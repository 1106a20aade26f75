"""Pre-training objectives as seqio preprocessors: pure tf.data functions of the
tokenized documents and a seed.

Each objective names the features it produces and the seqio feature converter
that packs them for a model: `lm` (decoder-only, targets), `prefix_lm`
(decoder-only, inputs as a bidirectional prefix of the targets) or `enc_dec`
(encoder-decoder, inputs and targets).
"""

import dataclasses
import functools
from typing import Callable

from pretrain.data.objectives import bart, clm, fim, mlm, prefix_lm, span_corruption, ul2
from pretrain.errors import UserError


@dataclasses.dataclass(frozen=True)
class Objective:
  name: str
  preprocess: Callable    # (dataset, sequence_length, output_features) -> dataset, after tokenization
  converter: str          # lm | prefix_lm | enc_dec | encoder

  @property
  def features(self) -> tuple[str, ...]:
    return {"lm": ("targets",), "encoder": ("inputs", "targets", "weights")}.get(self.converter,
                                                                               ("inputs", "targets"))


NAMES = ("clm", "span_corruption", "prefix_lm", "prefix_lm_decoder", "ul2", "ul2_decoder", "mlm", "fim", "bart")


def make(name: str, data_cfg, seed: int) -> Objective:
  """The objective `name` with its parameters from the `data` config."""
  if name == "clm":
    return Objective(name, clm.clm, "lm")
  if name == "span_corruption":
    spec = span_corruption.SpanCorruption(data_cfg.noise_density, data_cfg.mean_noise_span_length)
    spec.check()
    return Objective(name, functools.partial(span_corruption.span_corruption, spec=spec, seed=seed), "enc_dec")
  if name == "mlm":
    return Objective(name, functools.partial(mlm.mlm, seed=seed, rate=data_cfg.mlm_rate), "encoder")
  if name == "fim":
    return Objective(name, functools.partial(fim.fim, seed=seed, rate=data_cfg.fim_rate,
                                             spm_rate=data_cfg.fim_spm_rate), "lm")
  if name == "bart":
    spec = bart.BartNoise(data_cfg.bart_permute_sentences, data_cfg.bart_rotate, data_cfg.bart_mask_rate,
                          data_cfg.bart_delete_rate, data_cfg.bart_infilling_rate)
    spec.check()
    return Objective(name, functools.partial(bart.bart, spec=spec, seed=seed), "enc_dec")
  decoder = name.endswith("_decoder")
  converter = "prefix_lm" if decoder else "enc_dec"
  if name.startswith("prefix_lm"):
    return Objective(name, functools.partial(prefix_lm.prefix_lm, seed=seed, decoder=decoder), converter)
  if name.startswith("ul2"):
    denoisers = ul2.parse_denoisers(data_cfg.ul2_denoisers)
    return Objective(name, functools.partial(ul2.ul2, denoisers=denoisers, seed=seed, decoder=decoder), converter)
  raise UserError(f"unknown objective {name!r}; choose one of {', '.join(NAMES)}")
