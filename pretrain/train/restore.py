"""A trained run, restored from its workdir: config, vocabulary, model, parameters."""

import dataclasses
import json
import os

import flax.linen as nn
import jax
import ml_collections
import seqio

from pretrain import files, models
from pretrain.data import objectives, pipeline, vocab
from pretrain.errors import UserError
from pretrain.parallel import mesh as mesh_lib
from pretrain.train import checkpoint, optimizer, state as state_lib
from pretrain.train.loop import VOCAB_FILE


@dataclasses.dataclass
class Trained:
  cfg: ml_collections.ConfigDict
  objective: objectives.Objective
  vocabulary: seqio.SentencePieceVocabulary
  model: object
  params: object
  step: int

  @property
  def lengths(self) -> dict[str, int]:
    return pipeline.feature_lengths(self.cfg.data, self.objective)


def load(workdir: str) -> Trained:
  """Restores the latest checkpoint of a run made by `python -m pretrain.train`."""
  path = os.path.join(workdir, "config.json")
  if not files.exists(path):
    raise UserError(f"{workdir!r} holds no run (no config.json); give the --workdir of a training run")
  cfg = ml_collections.ConfigDict(json.loads(files.read_text(path)))
  objective = objectives.make(cfg.data.objective, cfg.data, cfg.train.seed)
  vocabulary = vocab.load(os.path.join(workdir, VOCAB_FILE), cfg.tokenizer.extra_ids)
  model = models.build(cfg.model, vocabulary.vocab_size, objective.converter)
  saver = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), cfg.train.keep_checkpoints)
  step = saver.latest_step()
  if step is None:
    raise UserError(f"{workdir!r} has no checkpoint yet; train first (or wait for train.checkpoint_every steps)")
  mesh, rules = mesh_lib.make_mesh(cfg.mesh), mesh_lib.rules(cfg.mesh)
  tx = optimizer.make(cfg.optimizer, cfg.train.steps)
  example_args = models.example_args(model, pipeline.feature_lengths(cfg.data, objective))
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    shardings = state_lib.shardings(model, tx, example_args, mesh, rules)
    target = state_lib.abstract(model, tx, example_args, shardings)
    models.check_shapes(saver.saved_params(step), target.params, f"the checkpoint of step {step} in {workdir!r}")
    state = saver.restore(step, target)
  saver.close()
  return Trained(cfg, objective, vocabulary, model, state.params, step)
