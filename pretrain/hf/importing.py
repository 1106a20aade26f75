"""A Hugging Face directory imported to continue pre-training: its config, its vocabulary and its weights."""

import json
import os

import numpy as np
import safetensors.numpy

from pretrain import models, vocab
from pretrain.hf.architectures import ARCHITECTURES, WEIGHTS, architecture, imported, scaled_queries
from pretrain.models import mup
from pretrain.system.console import log
from pretrain.system.errors import UserError
from pretrain.vocab import hf_export as tokenizer


def read_config(hf_dir: str) -> tuple[object, dict]:
  """(the architecture's module, config.json) of a Hugging Face directory, or a UserError naming what is
  wrong."""
  if "://" in hf_dir:
    raise UserError(f"{hf_dir!r} is not a local directory: a Hugging Face import reads local files",
                    fix="copy it to this machine first (gcloud storage cp -r, or huggingface-cli download)")
  path = os.path.join(hf_dir, "config.json")
  if not os.path.exists(path):
    raise UserError(f"{hf_dir!r} has no config.json; give a directory written by save_pretrained or pretrain export")
  with open(path) as f:
    config = json.load(f)
  model_type = config.get("model_type")
  module = imported(model_type)
  if module is None:
    supported = ", ".join(a.ARCHITECTURE for a in ARCHITECTURES if a.IMPORTS)
    raise UserError(f"{hf_dir!r} holds a {model_type!r} model ({', '.join(config.get('architectures') or [])}); "
                    f"only {supported} can be imported")
  return module, config


def import_config(cfg, hf_dir: str):
  """`cfg` with the model and tokenizer of a Hugging Face directory, checked against the objective."""
  module, hf_config = read_config(hf_dir)
  settings, unsupported = module.model_config(hf_config)
  if unsupported:
    raise UserError(f"{hf_dir!r} uses {', '.join(unsupported)}, which this project's models do not implement")
  # T5 calls its SentencePiece model spiece.model; an export of a `tokenizers` vocabulary has tokenizer.json only.
  names = (tokenizer.TOKENIZER_MODEL, "spiece.model", "tokenizer.json")
  path = next((os.path.join(hf_dir, n) for n in names if os.path.exists(os.path.join(hf_dir, n))), None)
  if path is None:
    raise UserError(f"{hf_dir!r} has no vocabulary ({', '.join(names)}) to tokenize with")
  cfg = cfg.copy_and_resolve_references()
  for key, value in settings.items():
    cfg.model[key] = value
  cfg.tokenizer.path = path
  try:
    cfg.tokenizer.kind = vocab.checked(path)[1].name  # As the file says (tokenizer.json: one of several kinds).
  except UserError:  # Its weights belong to its own ids: another vocabulary cannot stand in.
    raise UserError(f"{path!r} does not put pad, EOS and unknown at ids {(vocab.PAD_ID, vocab.EOS_ID, vocab.UNK_ID)} "
                    "as T5's vocabulary does and this project's models read it (Meta's and Mistral's own tokenizers "
                    "put unknown, BOS and EOS there), so its model cannot be imported") from None
  tokenizer_config = os.path.join(hf_dir, "tokenizer_config.json")
  if os.path.exists(tokenizer_config):
    with open(tokenizer_config) as f:
      cfg.tokenizer.extra_ids = json.load(f).get("extra_ids", cfg.tokenizer.extra_ids)
  return cfg


def _load_safetensors(path: str) -> dict[str, np.ndarray]:
  """The tensors of one .safetensors file, or one line naming a damaged one (cut short, or not safetensors)."""
  try:
    return safetensors.numpy.load_file(path)
  except Exception as e:  # pylint: disable=broad-except  (safetensors' Rust error type is not importable as such)
    if type(e).__name__ != "SafetensorError":
      raise
    raise UserError(f"{path!r} is damaged ({e}): it was cut short or is not a safetensors file; download or export "
                    "it again") from None


def load_weights(hf_dir: str) -> dict[str, np.ndarray]:
  """The tensors of model.safetensors, or of every shard listed in its index."""
  single, index = os.path.join(hf_dir, WEIGHTS), os.path.join(hf_dir, WEIGHTS + ".index.json")
  if os.path.exists(single):
    return _load_safetensors(single)
  if os.path.exists(index):
    with open(index) as f:
      files = sorted(set(json.load(f)["weight_map"].values()))
    missing = [name for name in files if not os.path.exists(os.path.join(hf_dir, name))]
    if missing:
      raise UserError(f"{index!r} lists {', '.join(missing)}, which {hf_dir!r} lacks; download every shard")
    return {k: v for name in files for k, v in _load_safetensors(os.path.join(hf_dir, name)).items()}
  raise UserError(f"{hf_dir!r} has no {WEIGHTS} (or sharded index); save the model with safe_serialization")


def init_config(cfg, family):
  """`cfg` (with train.init_from_hf set) takes the model and tokenizer of that Hugging Face directory, whose
  architecture must be the one `family` (of data.objective) exports to."""
  path = cfg.train.init_from_hf
  module, _ = read_config(path)
  if module.FAMILY != family.hf:
    raise UserError(f"train.init_from_hf={path!r} holds a {module.FAMILY} model, but data.objective="
                    f"{cfg.data.objective!r} trains {family.architecture}; choose an objective of that family")
  imported = import_config(cfg, path)
  changed = [f"model.{k}={v!r}" for k, v in imported.model.items() if cfg.model.get(k) != v]
  log(f"Initialising from {path}: " + ", ".join(changed + [f"tokenizer.path={imported.tokenizer.path!r}"]))
  return imported


def import_params(hf_dir: str, family, model_cfg, expected) -> dict:
  """Our parameters from a Hugging Face directory, checked against the shapes `expected` (a pytree of shapes)."""
  state = load_weights(hf_dir)
  try:
    params = architecture(family.hf, model_cfg).from_hf(state, model_cfg)
  except KeyError as e:
    raise UserError(f"{hf_dir!r} lacks the weight {e.args[0]!r} that its config.json implies") from None
  models.check_shapes(params, expected, f"the weights in {hf_dir!r}")
  return scaled_queries(params, 1 / mup.query_scale(model_cfg))
