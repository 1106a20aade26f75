"""A run exported to a directory `transformers` loads: config.json, model.safetensors and the tokenizer files."""

import json
import os
import shutil
import tempfile

import flax.linen as nn
from huggingface_hub import serialization
import jax
import numpy as np
import safetensors.numpy

from pretrain import models
from pretrain.hf.architectures import WEIGHTS, architecture, scaled_queries
from pretrain.models import mup
from pretrain.system.errors import UserError
from pretrain.vocab import hf_export as tokenizer


# transformers' save_pretrained default: files well under the Hub's 50 GB each, as transformers loads them.
MAX_SHARD_SIZE = "5GB"


def refuse_written(out_dir: str) -> None:
  """An export writes a new (or empty) directory: one that holds anything is refused."""
  if os.path.exists(out_dir) and not (os.path.isdir(out_dir) and not os.listdir(out_dir)):
    raise UserError(f"--out={out_dir!r} exists and is not an empty directory; give a new directory")


def export(out_dir: str, run, params, vocabulary=None, max_shard_size: int | str = MAX_SHARD_SIZE) -> str:
  """Writes config.json, model.safetensors (or shards of at most `max_shard_size` and their index, as
  transformers writes them) and the tokenizer files of a run (pretrain.run.Run; its vocabulary unless
  `vocabulary` is given) to `out_dir`.

  Written into a temporary directory and renamed, so a failed export leaves
  nothing behind. Returns the architecture written.
  """
  run.family.check_exportable()
  model_cfg, max_length = run.cfg.model, sum(run.task_lengths.values())
  module = architecture(run.family.hf, model_cfg)
  refuse_written(out_dir)
  params = jax.tree.map(np.asarray, jax.device_get(nn.meta.unbox(params)))
  models.check_shapes(params, run.abstract_state().params, "the checkpoint")
  config = module.hf_config(model_cfg, run.model.config.vocab_size, max_length)  # Refuses what it cannot write.
  params = scaled_queries(params, mup.query_scale(model_cfg))
  state = module.to_hf(params, model_cfg)  # Views of the parameters, mostly (transposed): copied shard by shard.
  parent = os.path.dirname(os.path.abspath(out_dir))
  os.makedirs(parent, exist_ok=True)
  staging = tempfile.mkdtemp(dir=parent, prefix=".export-")
  try:
    _save_weights(state, staging, max_shard_size)
    with open(os.path.join(staging, "config.json"), "w") as f:
      json.dump(config, f, indent=2)
    if run.family.generates:
      generation = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id",
                                           "use_cache") if k in config}
      if generation.get("pad_token_id") is None:  # A batch of generations ends with EOS: pad with it.
        generation["pad_token_id"] = config["eos_token_id"]
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


def _save_weights(state: dict[str, np.ndarray], directory: str, max_shard_size: int | str) -> None:
  """model.safetensors, or shards (model-00001-of-0000N.safetensors) and model.safetensors.index.json, in float32:
  each shard's contiguous copies are made as it is written, so the host holds one shard of them at a time beside
  the parameters, not a second model."""
  split = serialization.split_state_dict_into_shards_factory(
      state, get_storage_size=lambda array: np.size(array) * 4, max_shard_size=max_shard_size,
      filename_pattern=WEIGHTS.replace(".safetensors", "{suffix}.safetensors"))
  for filename, names in split.filename_to_tensors.items():
    safetensors.numpy.save_file({name: np.ascontiguousarray(state[name], np.float32) for name in names},
                                os.path.join(directory, filename), metadata={"format": "pt"})
  if split.is_sharded:
    with open(os.path.join(directory, WEIGHTS + ".index.json"), "w") as f:
      json.dump({"metadata": split.metadata, "weight_map": split.tensor_to_filename}, f, indent=2)


def _as_umask_allows(directory: str) -> None:
  """The permissions a directory and its files made in the usual way would have (mkdtemp's are owner-only): an
  export is meant to be shared."""
  umask = os.umask(0)
  os.umask(umask)
  os.chmod(directory, 0o777 & ~umask)
  for name in os.listdir(directory):
    os.chmod(os.path.join(directory, name), 0o666 & ~umask)
