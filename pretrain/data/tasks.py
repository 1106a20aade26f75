"""seqio Tasks: a source, a vocabulary and an objective's preprocessors, by name.

Names are `{source}_{objective}`, e.g. `corpus_clm` for causal LM on the
bundled corpus.
"""

import functools

import seqio

from pretrain.data import objectives
from pretrain.data.sources import Source

OBJECTIVES = {"clm": objectives.CLM_PREPROCESSORS}


def register(source: Source, vocabulary: seqio.Vocabulary, objective: str = "clm") -> str:
  """Registers (or re-registers) the task and returns its name."""
  if objective not in OBJECTIVES:
    from pretrain.errors import UserError  # pylint: disable=g-import-not-at-top
    raise UserError(f"unknown objective {objective!r}; choose one of {sorted(OBJECTIVES)}")
  name = f"{source.name}_{objective}"
  seqio.TaskRegistry.remove(name)
  seqio.TaskRegistry.add(
      name,
      source=source.data_source,
      preprocessors=[functools.partial(seqio.preprocessors.rekey, key_map={"targets": source.text_key}),
                     *OBJECTIVES[objective]],
      output_features={"targets": seqio.Feature(vocabulary, add_eos=True)},
  )
  return name
