"""What an objective declares: one class per objective, in a module of its own.

An objective names its model family (pretrain/families/, or a subclass of one
in its own module when it brings its own model or loss terms), the config
settings it reads with their defaults and valid values, the vocabulary pieces
it needs as single ids, the checks of a config and of a source it must pass
before any data work, and the seqio preprocessor that turns tokenized
documents into its examples: a pure tf.data function of the documents and the
seed. The registry (pretrain/objectives/registry.py) collects the built-in
ones; `data.objective=MODULE:CLASS` (or `FILE.py:CLASS`) names one of a user's.
"""

from pretrain.config.schema import Field
from pretrain.families import Family


# A config field an objective reads: declared as the core fields are (its default, its valid values, None: any
# value of the default's type, or checked by the objective's own check(), and one line of help).
Setting = Field


class Objective:
  """The base of objective specs. A subclass sets the class attributes and defines preprocess(); an instance is
  the objective with the run's data settings and seed."""
  name: str = ""                          # the task names {source}_{name}
  family: Family | None = None            # the model it trains
  settings: dict[str, Setting] = {}       # dotted config keys ('data.noise_density') it reads
  pieces: tuple[str, ...] = ()            # special tokens it needs as single pieces of the vocabulary
  mode_tokens: tuple[str, ...] = ()       # the tokens that begin its inputs, each naming a mode (UL2's)
  # How a row of inputs + targets of a given size is best split (pretrain/experiments/compare_objectives.py):
  # 'half', or 'longest_inputs' where the targets are the shorter (span corruption: the longest inputs whose
  # targets still fit hold the most text).
  row_split: str = "half"
  # Whether its loss is on every token of every document once, and each document's EOS (causal LM): then a whole
  # split's summed loss over the split's words is the per-word perplexity of word-level language modelling.
  scores_every_word: bool = False

  @property
  def in_order(self) -> bool:
    """Whether its rows read the source's documents in their order (a stream context): then the indexed pipeline
    keeps each window's documents in the store's order and shuffles only the windows and the rows."""
    return False

  def __init__(self, data_cfg=None, seed: int = 0):
    self.data, self.seed = data_cfg, seed

  def __repr__(self) -> str:
    return f"<objective {self.name}>"

  def preprocess(self, dataset, sequence_length, output_features):
    """The seqio preprocessor: tokenized documents {'targets': ids} -> the task's features (its family's
    task_features), before the feature converter packs them."""
    raise NotImplementedError

  @classmethod
  def check(cls, cfg) -> None:
    """Refuses settings with which the objective cannot make examples (e.g. lengths too short for its noise), from
    the config alone: it runs before any data is read or compiled."""

  def check_source(self, source, vocabulary) -> None:
    """Refuses a data source the objective cannot use (it may read the source's first documents)."""

  def span_rows(self, prefix: list[int], middle: list[int], suffix: list[int], vocabulary,
                task_lengths: dict[str, int]):
    """The rows that score `middle` as a masked span between `prefix` and `suffix`, for an objective trained to
    fill such spans (span corruption); None where the objective has no such form."""
    return None

  def score_rows(self, context: list[int], continuation: list[int], vocabulary, task_lengths: dict[str, int]):
    """The model rows that score a continuation after a context as this objective's model reads text (its
    family's score_rows: pretrain/downstream/likelihood.py); an objective whose examples have another form
    (a mode token, a prefix instead of a span) gives that form."""
    return self.family.score_rows(context, continuation, vocabulary, task_lengths)
