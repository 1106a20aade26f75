"""seqio Tasks: a source, a vocabulary and an objective, registered by name.

Names are `{source}_{objective}`, e.g. `corpus_clm` for causal LM on the
bundled corpus or `corpus_ul2_decoder` for UL2 examples for a decoder-only model.
"""

import functools
import importlib
import os


from pretrain import config as config_lib
from pretrain.data import long_documents
from pretrain.data.sources import Source
from pretrain.system import tf_loader
from pretrain.system.errors import UserError
from pretrain.vocab import pipeline as vocab

seqio = tf_loader.Lazy("seqio")


def task_name(source: Source, objective) -> str:
  return f"{source.name}_{objective.name}"


def register(source: Source, vocabulary: seqio.Vocabulary, objective) -> str:
  """Registers (or re-registers) the task of an objective (pretrain.objectives.Objective: its name, its family's
  task features and its preprocessor) and returns its name."""
  name = task_name(source, objective)
  features = {"targets": seqio.Feature(vocabulary, add_eos=True)}
  if "inputs" in objective.family.task_features:  # Decoder-only models read the inputs as a prefix, without EOS.
    features["inputs"] = seqio.Feature(vocabulary, add_eos=objective.family.inputs_end_with_eos)
  for feature in ("weights", "pair_label"):  # 0/1 values, not tokens
    if feature in objective.family.task_features:
      features[feature] = seqio.Feature(seqio.PassThroughVocabulary(2), add_eos=False)
  seqio.TaskRegistry.remove(name)
  seqio.TaskRegistry.add(
      name,
      source=source.task_source(),
      preprocessors=[functools.partial(seqio.preprocessors.rekey, key_map={"targets": source.text_key}),
                     long_documents.split_long_documents, seqio.preprocessors.tokenize,
                     # What comes before is the token store's (pretrain/data/token_store.py), after it the objective.
                     seqio.CacheDatasetPlaceholder(), objective.preprocess],
      output_features=features,
  )
  return name


def register_mixture(members: list[tuple[Source, float]], vocabulary: seqio.Vocabulary, objective) -> str:
  """One task per source and a seqio Mixture of them at the given rates; returns its name.

  A single source at rate 1 is just its task.
  """
  if len(members) == 1:
    return register(members[0][0], vocabulary, objective)
  name = f"mixture_{objective.name}"
  seqio.MixtureRegistry.remove(name)
  seqio.MixtureRegistry.add(name, [(register(source, vocabulary, objective), rate) for source, rate in members])
  return name


def user_task(data_cfg, tokenizer_cfg, family) -> tuple[str, seqio.SentencePieceVocabulary]:
  """data.task: a seqio Task or Mixture that the user's code registers (data.task_module: a module name or a .py
  file, imported first), checked against the model family; returns its name and its vocabulary."""
  name, module = data_cfg.task, data_cfg.task_module
  if module.endswith(".py"):
    if not os.path.isfile(module):
      raise UserError(f"data.task_module={module!r} does not exist; give the .py file that registers {name!r}")
    config_lib.load_module(module, f"_pretrain_task_{os.path.splitext(os.path.basename(module))[0]}")
  elif module:
    try:
      importlib.import_module(module)
    except ImportError as e:
      raise UserError(f"data.task_module={module!r} cannot be imported ({e}); give an importable module or a .py "
                      "file") from None
  try:
    task = seqio.get_mixture_or_task(name)
  except ValueError:
    raise UserError(f"data.task={name!r} is not a registered seqio Task or Mixture; register it in the code that "
                    f"data.task_module names (now {module!r})") from None
  features = task.output_features
  if set(family.task_features) - set(features):
    raise UserError(f"data.task={name!r} gives the features {sorted(features)}, but the {family.name} model of "
                    f"data.objective={data_cfg.objective!r} reads {list(family.task_features)}; choose the objective "
                    "of the task's model family")
  vocabulary = features["targets"].vocabulary
  if not isinstance(vocabulary, (seqio.SentencePieceVocabulary, vocab.TokenizersVocabulary)):
    raise UserError(f"data.task={name!r} uses a {type(vocabulary).__name__}; the project's runs need a "
                    "seqio.SentencePieceVocabulary or pretrain.vocab.pipeline.TokenizersVocabulary (the "
                    "workdir keeps its model for generate, eval and export)")
  if vocabulary.extra_ids != tokenizer_cfg.extra_ids:
    raise UserError(f"data.task={name!r}'s vocabulary has {vocabulary.extra_ids} extra ids; set "
                    f"--config.tokenizer.extra_ids={vocabulary.extra_ids}")
  if isinstance(vocabulary, seqio.SentencePieceVocabulary):  # seqio's own: the same model, read as ours.
    vocabulary = vocab.load(vocabulary.sentencepiece_model_file, vocabulary.extra_ids)
  return name, vocabulary
