"""UL2's mixture of denoisers (Tay et al. 2022).

R-denoisers are regular span corruption, X-denoisers extreme (long spans or
dense noise), the S-denoiser is prefix LM. Each example's inputs start with
its denoiser's mode token: [NLU] for R, [NLG] for X, [S2S] for S.

Documents are concatenated (as for span corruption) and the stream is cut into
consecutive segments, each with a denoiser drawn at the configured rates and
as long as that denoiser's raw segment length: every token is used once, the
denoisers' frequencies follow the rates, and the data is read and tokenized
once.
"""

import dataclasses

from pretrain import families, vocab
from pretrain.objectives import common, prefix_lm
from pretrain.objectives.span_corruption import SpanCorruption, check_lengths, corrupt
from pretrain.objectives.spec import Objective, Setting
from pretrain.system import tf_loader
from pretrain.system.errors import UserError

tf = tf_loader.Lazy("tensorflow")

MODE_TOKENS = {"R": "[NLU]", "X": "[NLG]", "S": "[S2S]"}
# The paper's seven denoisers at equal rates: (kind, mean_noise_span_length, noise_density, rate).
DENOISERS = (("R", 3, 0.15, 1.0), ("R", 8, 0.15, 1.0),
             ("X", 3, 0.5, 1.0), ("X", 8, 0.5, 1.0), ("X", 64, 0.15, 1.0), ("X", 64, 0.5, 1.0),
             ("S", 0, 0, 1.0))


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
    numbers = row[1:] if len(row) == 4 else ()
    if len(row) != 4 or row[0] not in MODE_TOKENS or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers):
      raise UserError(f"data.ul2_denoisers row {tuple(row)} is invalid; write (kind, mean_noise_span_length, "
                      "noise_density, rate) with kind R, X or S and three numbers")
    denoisers.append(Denoiser(row[0], *map(float, numbers)))
  if not denoisers or any(d.rate < 0 for d in denoisers) or sum(d.rate for d in denoisers) <= 0:
    raise UserError("data.ul2_denoisers needs at least one denoiser and non-negative rates with a positive sum")
  return tuple(denoisers)


def segment_length(denoiser: Denoiser, sequence_length, num_sentinels: int, decoder: bool) -> int:
  """The raw segment length of one denoiser, after checking that the feature lengths and sentinels suffice."""
  try:
    if denoiser.kind == "S":
      return prefix_lm.segment_length(sequence_length, MODE_TOKENS["S"], decoder)
    return check_lengths(SpanCorruption(denoiser.noise_density, denoiser.mean_noise_span_length),
                         sequence_length["inputs"], sequence_length["targets"], num_sentinels, reserved=1)
  except UserError as e:
    raise UserError(f"UL2 {denoiser.describe()}: {e}") from None


def _branch(denoiser: Denoiser, sequence_length, vocabulary, decoder: bool):
  """(raw segment length, fn(tokens, seed) -> finished example) of one denoiser."""
  mode_id = vocab.single_piece_id(vocabulary, MODE_TOKENS[denoiser.kind])
  length = segment_length(denoiser, sequence_length, vocabulary.extra_ids, decoder)
  if denoiser.kind == "S":
    make = prefix_lm.split_at_random_point
  else:
    spec = SpanCorruption(denoiser.noise_density, denoiser.mean_noise_span_length)
    first_sentinel = vocab.sentinel_id(vocabulary, 0)
    make = lambda tokens, seed: corrupt(tokens, spec, seed, first_sentinel)
  return length, lambda tokens, seed: common.finish_example(make(tokens, seed), mode_id, vocabulary.eos_id, decoder)


def ul2(dataset, sequence_length, output_features, *, denoisers: tuple[Denoiser, ...], seed: int,
        decoder: bool = False):
  """seqio preprocessor: documents of 'targets' tokens -> {'inputs', 'targets'} examples."""
  vocabulary = output_features["targets"].vocabulary
  lengths, makers = [], []
  for d in denoisers:
    length, make = _branch(d, sequence_length, vocabulary, decoder)
    lengths.append(length)
    makers.append(make)
  total = sum(d.rate for d in denoisers)
  log_rates = tf.math.log([[d.rate / total for d in denoisers]])
  segment_lengths = tf.constant(lengths, tf.int32)

  def carve(example):
    """Cuts a token stream into segments, each with its own denoiser."""
    tokens = example["targets"]
    n = tf.size(tokens)
    kinds = tf.random.stateless_categorical(log_rates, n // min(lengths) + 1, common.example_seed(tokens, seed))
    kinds = tf.cast(kinds[0], tf.int32)
    sizes = tf.gather(segment_lengths, kinds)
    starts = tf.cumsum(sizes, exclusive=True)
    used = starts < n
    sizes = tf.boolean_mask(tf.minimum(starts + sizes, n) - starts, used)
    return tf.data.Dataset.from_tensor_slices(
        {"tokens": tf.RaggedTensor.from_row_lengths(tokens, sizes), "kind": tf.boolean_mask(kinds, used)})

  def denoise(segment):
    tokens = segment["tokens"]
    seed_pair = common.example_seed(tokens, seed, salt=1)
    return tf.switch_case(segment["kind"], [lambda make=make: make(tokens, seed_pair) for make in makers])

  dataset = common.concatenate(dataset).flat_map(carve)
  return dataset.map(denoise, num_parallel_calls=tf.data.AUTOTUNE)


class UL2(Objective):
  """The mixture of denoisers for the encoder-decoder."""
  name, family, pieces = "ul2", families.ENCODER_DECODER, tuple(MODE_TOKENS.values())
  mode_tokens = pieces
  row_split = "longest_inputs"
  settings = {"data.ul2_denoisers": Setting(DENOISERS, help="rows (kind, mean_noise_span_length, noise_density, "
                                                           "rate); kind R, X or S (prefix LM)")}

  @classmethod
  def check(cls, cfg):
    for d in parse_denoisers(cfg.data.ul2_denoisers):
      segment_length(d, cls.family.task_lengths(cfg.data), cfg.tokenizer.extra_ids, cls.family.prefix_lm)

  def preprocess(self, dataset, sequence_length, output_features):
    return ul2(dataset, sequence_length, output_features, denoisers=parse_denoisers(self.data.ul2_denoisers),
               seed=self.seed, decoder=self.family.prefix_lm)

  def score_rows(self, context, continuation, vocabulary, task_lengths):
    """As the S-denoiser's examples (UL2's mode for continuing text): [S2S] and the context as the inputs, the
    continuation as the targets."""
    mode = vocab.single_piece_id(vocabulary, MODE_TOKENS["S"])
    # The mode token stays when the context is cut to fit.
    context = [mode, *families.cut_left(context, sum(task_lengths.values()) - len(continuation) - 1
                                         if self.family.prefix_lm else task_lengths["inputs"] - 2)]
    return self.family.score_rows(context, continuation, vocabulary, task_lengths, span=False)


class UL2Decoder(UL2):
  """The same examples as prefix-LM rows of the decoder-only model."""
  name, family = "ul2_decoder", families.PREFIX_LM
