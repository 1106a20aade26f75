"""UL2's mixture of denoisers (Tay et al. 2022).

R-denoisers are regular span corruption, X-denoisers extreme (long spans or
dense noise), the S-denoiser is prefix LM. Each example's inputs start with
its denoiser's mode token: [NLU] for R, [NLG] for X, [S2S] for S. Documents
are dealt to the denoisers by a hash of their content; examples are drawn from
the denoisers' streams at the configured rates.
"""

import dataclasses

import tensorflow as tf

from pretrain.data import vocab
from pretrain.data.objectives import common
from pretrain.data.objectives.prefix_lm import prefix_lm
from pretrain.data.objectives.span_corruption import SpanCorruption, span_corruption
from pretrain.errors import UserError

MODE_TOKENS = {"R": "[NLU]", "X": "[NLG]", "S": "[S2S]"}


@dataclasses.dataclass(frozen=True)
class Denoiser:
  kind: str                       # R, X or S
  mean_noise_span_length: float = 0.0   # R and X only
  noise_density: float = 0.0           # R and X only
  rate: float = 1.0

  def describe(self) -> str:
    if self.kind == "S":
      return "S-denoiser (prefix LM)"
    return f"{self.kind}-denoiser (mean_noise_span_length={self.mean_noise_span_length:g}, " \
           f"noise_density={self.noise_density:g})"


def parse_denoisers(rows) -> tuple[Denoiser, ...]:
  """Denoisers from config rows (kind, mean_noise_span_length, noise_density, rate)."""
  denoisers = []
  for row in rows:
    if len(row) != 4 or row[0] not in MODE_TOKENS:
      raise UserError(f"data.ul2_denoisers row {tuple(row)} is invalid; write (kind, mean_noise_span_length, "
                      "noise_density, rate) with kind R, X or S")
    denoisers.append(Denoiser(row[0], float(row[1]), float(row[2]), float(row[3])))
  if not denoisers or any(d.rate < 0 for d in denoisers) or sum(d.rate for d in denoisers) <= 0:
    raise UserError("data.ul2_denoisers needs at least one denoiser and non-negative rates with a positive sum")
  return tuple(denoisers)


def ul2(dataset, sequence_length, output_features, *, denoisers: tuple[Denoiser, ...], seed: int,
        decoder: bool = False):
  """seqio preprocessor: documents of 'targets' tokens -> {'inputs', 'targets'} examples."""
  count = len(denoisers)

  def bucket(example):
    seed_pair = common.example_seed(example["targets"], seed, salt=count)
    return tf.random.stateless_uniform([], seed_pair, minval=0, maxval=count, dtype=tf.int32)

  dataset = dataset.map(lambda ex: {"targets": ex["targets"], "bucket": bucket(ex)})
  streams = []
  for i, d in enumerate(denoisers):
    documents = dataset.filter(lambda ex, i=i: ex["bucket"] == i).map(lambda ex: {"targets": ex["targets"]})
    kwargs = dict(seed=seed, mode_token=MODE_TOKENS[d.kind], decoder=decoder, salt=i)
    try:
      if d.kind == "S":
        streams.append(prefix_lm(documents, sequence_length, output_features, **kwargs))
      else:
        spec = SpanCorruption(d.noise_density, d.mean_noise_span_length)
        streams.append(span_corruption(documents, sequence_length, output_features, spec=spec, **kwargs))
    except UserError as e:
      raise UserError(f"UL2 {d.describe()}: {e}") from None
  rates = [d.rate / sum(d.rate for d in denoisers) for d in denoisers]
  return tf.data.Dataset.sample_from_datasets(streams, weights=rates, seed=seed, stop_on_empty_dataset=False)


def check_mode_tokens(vocabulary, denoisers) -> None:
  for d in denoisers:
    vocab.single_piece_id(vocabulary, MODE_TOKENS[d.kind])
