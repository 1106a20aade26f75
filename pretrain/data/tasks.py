"""seqio Tasks: a source, a vocabulary and an objective, registered by name.

Names are `{source}_{objective}`, e.g. `corpus_clm` for causal LM on the
bundled corpus or `corpus_ul2_decoder` for UL2 examples for a decoder-only model.
"""

import functools

import seqio

from pretrain.data import long_documents, objectives
from pretrain.data.sources import Source


def task_name(source: Source, objective: objectives.Objective) -> str:
  return f"{source.name}_{objective.name}"


def register(source: Source, vocabulary: seqio.Vocabulary, objective: objectives.Objective) -> str:
  """Registers (or re-registers) the task and returns its name."""
  name = task_name(source, objective)
  features = {"targets": seqio.Feature(vocabulary, add_eos=True)}
  if "inputs" in objective.family.task_features:  # Decoder-only models read the inputs as a prefix, without EOS.
    features["inputs"] = seqio.Feature(vocabulary, add_eos=objective.family.inputs_end_with_eos)
  if "weights" in objective.family.task_features:
    features["weights"] = seqio.Feature(seqio.PassThroughVocabulary(2), add_eos=False)
  seqio.TaskRegistry.remove(name)
  seqio.TaskRegistry.add(
      name,
      source=source.data_source,
      preprocessors=[functools.partial(seqio.preprocessors.rekey, key_map={"targets": source.text_key}),
                     long_documents.split_long_documents, seqio.preprocessors.tokenize,
                     # What comes before is the token store's (pretrain/data/token_store.py), after it the objective.
                     seqio.CacheDatasetPlaceholder(), objective.preprocess],
      output_features=features,
  )
  return name


def register_mixture(members: list[tuple[Source, float]], vocabulary: seqio.Vocabulary,
                     objective: objectives.Objective) -> str:
  """One task per source and a seqio Mixture of them at the given rates; returns its name.

  A single source at rate 1 is just its task.
  """
  if len(members) == 1:
    return register(members[0][0], vocabulary, objective)
  name = f"mixture_{objective.name}"
  seqio.MixtureRegistry.remove(name)
  seqio.MixtureRegistry.add(name, [(register(source, vocabulary, objective), rate) for source, rate in members])
  return name


def register_all(source: Source, vocabulary: seqio.Vocabulary, data_cfg, seed: int) -> list[str]:
  return [register(source, vocabulary, objectives.make(n, data_cfg, seed)) for n in objectives.NAMES]
