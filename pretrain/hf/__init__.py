"""Hugging Face format: export a run to a directory `transformers` loads, and
import such a directory to continue pre-training.

One module per architecture, listed once in ARCHITECTURES: decoder-only models
are Llama (llama.py), or with experts Mixtral (mixtral.py) or Qwen2-MoE
(qwen2_moe.py); encoder-decoder models T5 v1.1 (t5.py), or with experts the
Switch Transformer (switch_transformers.py); an ELECTRA run exports its
discriminator in a format of its own (electra.py), which is not imported. A
module says its architecture, model_type, the family it serves (a family's
`hf`) and which of that family's model configs it holds (matches), and maps
the config and the weights both ways. The tokenizer is the run's vocabulary as
tokenizer.json (pretrain/vocab/hf_export.py), with a SentencePiece vocabulary's
.model file beside it.
"""

import json
import os
import shutil
import tempfile

import flax.linen as nn
import jax
import numpy as np
import safetensors.numpy

from pretrain import models, vocab
from pretrain.models import mup
from pretrain.hf import electra, llama, mistral, mixtral, qwen2_moe, switch_transformers, t5
from pretrain.system.console import log
from pretrain.system.errors import UserError
from pretrain.vocab import hf_export as tokenizer

# One line per architecture; of a family's, the first whose `matches` holds a run's model config exports it.
ARCHITECTURES = (llama, mixtral, qwen2_moe, t5, switch_transformers, electra, mistral)
WEIGHTS = "model.safetensors"


def architecture(family_hf: str, model_cfg):
  """The module that exports a model of the family whose `hf` is `family_hf` with this model config."""
  return next(a for a in ARCHITECTURES if a.FAMILY == family_hf and a.matches(model_cfg))


def imported(model_type: str):
  """The module that imports a config.json's model_type, or None."""
  return next((a for a in ARCHITECTURES if a.IMPORTS and a.MODEL_TYPE == model_type), None)


def export(out_dir: str, run, params, vocabulary=None) -> str:
  """Writes config.json, model.safetensors and the tokenizer files of a run (pretrain.run.Run; its vocabulary
  unless `vocabulary` is given) to `out_dir`.

  Written into a temporary directory and renamed, so a failed export leaves
  nothing behind. Returns the architecture written.
  """
  run.family.check_exportable()
  model_cfg, max_length = run.cfg.model, sum(run.task_lengths.values())
  module = architecture(run.family.hf, model_cfg)
  if os.path.exists(out_dir) and not (os.path.isdir(out_dir) and not os.listdir(out_dir)):
    raise UserError(f"--out={out_dir!r} exists and is not an empty directory; give a new directory")
  params = jax.tree.map(np.asarray, jax.device_get(nn.meta.unbox(params)))
  models.check_shapes(params, run.abstract_state().params, "the checkpoint")
  config = module.hf_config(model_cfg, run.model.config.vocab_size, max_length)  # Refuses what it cannot write.
  params = scaled_queries(params, mup.query_scale(model_cfg))
  state = {k: np.ascontiguousarray(v, np.float32) for k, v in module.to_hf(params, model_cfg).items()}
  parent = os.path.dirname(os.path.abspath(out_dir))
  os.makedirs(parent, exist_ok=True)
  staging = tempfile.mkdtemp(dir=parent, prefix=".export-")
  try:
    safetensors.numpy.save_file(state, os.path.join(staging, WEIGHTS), metadata={"format": "pt"})
    with open(os.path.join(staging, "config.json"), "w") as f:
      json.dump(config, f, indent=2)
    if run.family.generates:
      generation = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
                    if k in config}
      with open(os.path.join(staging, "generation_config.json"), "w") as f:
        json.dump(generation, f, indent=2)
    tokenizer.write(vocabulary or run.vocabulary, staging, module.PREPENDS_BOS)
    _as_umask_allows(staging)
    if os.path.exists(out_dir):
      os.rmdir(out_dir)
    os.rename(staging, out_dir)
  finally:
    shutil.rmtree(staging, ignore_errors=True)
  return config["architectures"][0]


def scaled_queries(params, factor: float):
  """`params` with every attention's query kernel times `factor`: muP's query multiplier (models/mup.py) folded
  into the weights on export (transformers scales by 1/sqrt(head_dim) only), and out of them (1/factor) on
  import."""
  if factor == 1:
    return params
  return jax.tree_util.tree_map_with_path(
      lambda path, p: p * np.asarray(factor, p.dtype) if getattr(path[-1], "key", None) == "query" else p, params)


def _as_umask_allows(directory: str) -> None:
  """The permissions a directory and its files made in the usual way would have (mkdtemp's are owner-only): an
  export is meant to be shared."""
  umask = os.umask(0)
  os.umask(umask)
  os.chmod(directory, 0o777 & ~umask)
  for name in os.listdir(directory):
    os.chmod(os.path.join(directory, name), 0o666 & ~umask)


def read_config(hf_dir: str) -> tuple[object, dict]:
  """(the architecture's module, config.json) of a Hugging Face directory, or a UserError naming what is
  wrong."""
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
  cfg.tokenizer.kind = vocab.checked(path)[1].name  # As the file says (tokenizer.json: one of several kinds).
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
