"""The training loop: build everything from the config, then train, evaluate,
checkpoint and sample.

Every user mistake is caught in `build`, before anything is compiled.
Rerunning with the same workdir resumes from its latest checkpoint; SIGTERM
or Ctrl-C saves a checkpoint at the current step and stops.
"""

import dataclasses
import itertools
import json
import math
import os
import signal
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import seqio
import tensorflow as tf
import tqdm

from pretrain import config as config_lib
from pretrain import files
from pretrain.data import objectives, pipeline, sources, tasks, vocab
from pretrain.errors import UserError
from pretrain import hf, models
from pretrain.models import decoding
from pretrain.parallel import mesh as mesh_lib
from pretrain.train import checkpoint, flops, metrics, optimizer, state as state_lib, steps

VOCAB_FILE = "spm.model"
# Config sections that fix the shapes of a checkpoint.
_SHAPE_SECTIONS = ("model", "tokenizer")


def log(message: str) -> None:
  if jax.process_index() == 0:
    tqdm.tqdm.write(message)


@dataclasses.dataclass
class Run:
  """Everything a run needs, built and checked before anything is compiled."""
  cfg: object
  workdir: str
  source: sources.Source
  vocabulary: seqio.SentencePieceVocabulary
  objective: objectives.Objective
  task: str
  model: object  # models.DecoderOnly, EncoderDecoder or EncoderOnly
  mesh: jax.sharding.Mesh
  rules: tuple
  # More evaluations, each {task name: objective}, from data.eval_objectives.
  eval_tasks: dict = dataclasses.field(default_factory=dict)


def _check_writable(workdir: str) -> None:
  try:
    files.write_atomically(os.path.join(workdir, ".writable"), b"")
    tf.io.gfile.remove(os.path.join(workdir, ".writable"))
  except (OSError, tf.errors.OpError) as e:
    reason = e.message if isinstance(e, tf.errors.OpError) else e.strerror
    raise UserError(f"workdir {workdir!r} cannot be written ({reason}); choose another --workdir") from None


def _check_same_shapes(cfg, workdir: str) -> None:
  """A workdir with checkpoints only resumes a run of the same model and vocabulary."""
  path = os.path.join(workdir, "config.json")
  if not (files.exists(path) and files.exists(os.path.join(workdir, "checkpoints"))):
    return
  saved = json.loads(files.read_text(path))
  current = cfg.to_dict()
  family = {"lm": "decoder-only", "prefix_lm": "decoder-only", "enc_dec": "encoder-decoder", "encoder": "encoder-only"}
  families = [family[objectives.make(name, cfg.data, 0).converter]
              for name in (saved["data"]["objective"], cfg.data.objective)]
  if families[0] != families[1]:
    raise UserError(f"workdir {workdir!r} holds checkpoints of a {families[0]} model (objective "
                    f"{saved['data']['objective']!r}), which data.objective={cfg.data.objective!r} cannot continue; "
                    "use a new --workdir")
  for section in _SHAPE_SECTIONS:
    for key, value in current[section].items():
      if saved.get(section, {}).get(key) != value:
        raise UserError(f"workdir {workdir!r} holds checkpoints of a run with {section}.{key}="
                        f"{saved.get(section, {}).get(key)!r}, not {value!r}; use a new --workdir or the old value")


_FAMILIES = {"lm": "llama", "prefix_lm": "llama", "enc_dec": "t5", "encoder": "an encoder-only model"}


def _imported(cfg):
  """With train.init_from_hf, the config takes the model and tokenizer of that Hugging Face directory."""
  path = cfg.train.get("init_from_hf")
  if not path:
    return cfg
  family, _ = hf.read_config(path)
  wanted = _FAMILIES[objectives.make(cfg.data.objective, cfg.data, 0).converter]
  if family != wanted:
    raise UserError(f"train.init_from_hf={path!r} holds a {family} model, but data.objective="
                    f"{cfg.data.objective!r} trains {wanted}; choose an objective of that family")
  imported = hf.import_config(cfg, path)
  changed = [f"model.{k}={v!r}" for k, v in imported.model.items() if cfg.model.get(k) != v]
  log(f"Initialising from {path}: " + ", ".join(changed + [f"tokenizer.path={imported.tokenizer.path!r}"]))
  return imported


def build(cfg, workdir: str) -> Run:
  cfg = _imported(cfg)
  config_lib.validate(cfg)
  _check_writable(workdir)
  _check_same_shapes(cfg, workdir)
  mesh = mesh_lib.make_mesh(cfg.mesh)
  rules = mesh_lib.rules(cfg.mesh)
  data_shards = mesh_lib.data_parallel_size(mesh, rules)
  if cfg.train.batch_size % data_shards:
    raise UserError(f"train.batch_size={cfg.train.batch_size} does not divide across {data_shards} data shards; "
                    f"use a multiple of {data_shards}")
  micro = cfg.train.get("microbatches", 1)
  if micro < 1 or cfg.train.batch_size % (micro * data_shards):
    raise UserError(f"train.batch_size={cfg.train.batch_size} does not split into train.microbatches={micro} "
                    f"microbatches across {data_shards} data shards; use a multiple of {max(micro, 1) * data_shards}")
  objective = objectives.make(cfg.data.objective, cfg.data, cfg.train.seed)
  members = sources.mixture_sources(cfg.data)
  source = members[0][0]  # Trains the vocabulary (unless tokenizer.path is set) and gives sample prompts.
  vocabulary = vocab.get_vocabulary(cfg, source)
  task = tasks.register_mixture(members, vocabulary, objective)
  eval_tasks = {}
  for name in cfg.data.get("eval_objectives", ()):
    extra = objectives.make(name, cfg.data, cfg.train.seed)
    if _FAMILIES[extra.converter] != _FAMILIES[objective.converter]:
      raise UserError(f"data.eval_objectives names {name!r}, which needs {_FAMILIES[extra.converter]}, but "
                      f"data.objective={cfg.data.objective!r} trains {_FAMILIES[objective.converter]}; "
                      "evaluate objectives of the trained family")
    eval_tasks[tasks.register_mixture(members, vocabulary, extra)] = extra
  model = models.build(cfg.model, vocabulary.vocab_size, objective.converter)
  if jax.process_index() == 0:  # What `pretrain generate` and `pretrain export` need, beside the checkpoints.
    # Atomically: the other processes of a resumed run read it meanwhile.
    files.write_atomically(os.path.join(workdir, "config.json"), config_lib.to_json(cfg).encode())
    tf.io.gfile.copy(vocabulary.sentencepiece_model_file, os.path.join(workdir, VOCAB_FILE), overwrite=True)
  return Run(cfg, workdir, source, vocabulary, objective, task, model, mesh, rules, eval_tasks)


def evaluate(eval_step, params, eval_batches) -> dict[str, float]:
  totals = {"loss": 0.0, "weight": 0.0, "correct": 0.0}
  for batch in eval_batches:
    for key, value in jax.device_get(eval_step(params, batch)).items():
      totals[key] += float(value)
  loss = totals["loss"] / max(totals["weight"], 1.0)
  return {"eval/loss": loss, "eval/accuracy": totals["correct"] / max(totals["weight"], 1.0),
          "eval/perplexity": math.exp(min(loss, 50.0))}


class _StopRequest:
  """Turns SIGTERM and the first Ctrl-C into a request to checkpoint and stop."""

  def __init__(self):
    self.signal = None
    self._previous = {}

  def __enter__(self):
    for sig in (signal.SIGTERM, signal.SIGINT):
      self._previous[sig] = signal.signal(sig, self._handle)
    return self

  def _handle(self, signum, frame):
    if self.signal is not None:  # A second Ctrl-C stops at once.
      raise KeyboardInterrupt
    self.signal = signum
    log(f"Received {signal.Signals(signum).name}: saving a checkpoint, then stopping.")

  def __exit__(self, *exc):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)


def _batches(run: Run, split: str, task: str | None = None, objective=None, **kwargs):
  c, objective = run.cfg, objective or run.objective
  return pipeline.batches(task or run.task, split, pipeline.feature_lengths(c.data, objective), c.train.batch_size,
                          objective.converter, seed=c.train.seed,
                          host_sharding=c.data.get("host_sharding", "source"), **kwargs)


def _resume_position(position: dict | None, run: Run) -> int:
  """Training examples to pass over on resuming: the saved data position of the same task, else none."""
  if position is None:
    raise UserError(f"the latest checkpoint in {run.workdir!r} has no data position (written by an older version); "
                    "start a new workdir")
  if position["task"] != run.task:
    log(f"The data changed from {position['task']} to {run.task}: reading {run.task} from its start.")
    return 0
  if position["processes"] != jax.process_count() and run.cfg.data.get("host_sharding", "source") == "source":
    log(f"The checkpoint was written by {position['processes']} processes and {jax.process_count()} resume it: with "
        "data.host_sharding=source each host's order of examples changes (use 'examples' to keep it).")
  return position["examples"]


def _eval_sets(run: Run, batch_sharding) -> dict[str, list]:
  """Validation batches by metric prefix: 'eval' for the trained task, 'eval/TASK' for each extra one."""
  c = run.cfg
  sets = {}
  for prefix, task, objective in [("eval", run.task, run.objective),
                                  *((f"eval/{t}", t, o) for t, o in run.eval_tasks.items())]:
    local = list(itertools.islice(_batches(run, "validation", task, objective, shuffle=False, repeat=False),
                                  c.train.eval_batches))
    if not local:
      raise UserError(f"the validation split of {task} holds less than one batch of {c.train.batch_size} "
                      "sequences; add validation data or lower train.batch_size")
    sets[prefix] = [mesh_lib.global_batch(b, batch_sharding) for b in local]
  return sets


def evaluate_all(eval_step, params, eval_sets) -> dict[str, float]:
  results = {}
  for prefix, batches in eval_sets.items():
    results.update({f"{prefix}/{k.split('/', 1)[1]}": v for k, v in evaluate(eval_step, params, batches).items()})
  return results


def samples(run: Run, params) -> list[tuple[str, str]]:
  """(prompt, continuation) pairs from the starts of validation documents.

  An encoder-decoder model reads the prompt followed by <extra_id_0> and EOS,
  and fills in that span.
  """
  c = run.cfg.sample
  encoder_decoder = isinstance(run.model, models.EncoderDecoder)
  if isinstance(run.model, models.EncoderOnly) or c.num <= 0:  # A masked LM does not generate text.
    return []
  prompts = []
  for text in run.source.texts("validation"):
    ids = run.vocabulary.encode(text)
    if len(ids) >= c.prompt_tokens:
      prompts.append(ids[:c.prompt_tokens])
    if len(prompts) == c.num:
      break
  if not prompts:
    return []
  params = jax.device_put(params, jax.sharding.NamedSharding(run.mesh, jax.sharding.PartitionSpec()))
  rng = jax.random.key(run.cfg.train.seed)
  if encoder_decoder:
    prompts = [p + [vocab.sentinel_id(run.vocabulary, 0), vocab.EOS_ID] for p in prompts]
    new = decoding.generate_encoder_decoder(run.model, params, jnp.asarray(prompts, jnp.int32), c.max_new_tokens,
                                            rng, temperature=c.temperature, num_valid=run.vocabulary.vocab_size)
  else:
    new = decoding.generate(run.model, params, jnp.asarray(prompts, jnp.int32), c.max_new_tokens, rng,
                            temperature=c.temperature, num_valid=run.vocabulary.vocab_size,
                            prefix_lm=run.objective.converter == "prefix_lm")
  pairs = []
  for prompt, continuation in zip(prompts, np.asarray(new).tolist()):
    if vocab.EOS_ID in continuation:
      continuation = continuation[:continuation.index(vocab.EOS_ID)]
    pairs.append((run.vocabulary.decode(prompt), run.vocabulary.decode(continuation)))
  return pairs


def train(cfg, workdir: str) -> dict:
  """Trains to `train.steps` and returns a summary; resumes from the workdir's checkpoints."""
  run = build(cfg, workdir)
  cfg, c = run.cfg, run.cfg.train
  tx = optimizer.make(cfg.optimizer, c.steps)
  lr_schedule = optimizer.schedule(cfg.optimizer, c.steps)
  lengths = pipeline.feature_lengths(cfg.data, run.objective)
  example_args = models.example_args(run.model, lengths)
  writer = metrics.MetricsWriter(workdir, enabled=jax.process_index() == 0)
  ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), c.keep_checkpoints)
  stop = _StopRequest()
  with jax.set_mesh(run.mesh), nn.logical_axis_rules(run.rules), stop:
    state_shardings = state_lib.shardings(run.model, tx, example_args, run.mesh, run.rules)
    batch_sharding = mesh_lib.batch_sharding(run.mesh, run.rules)
    start, skip_examples = ckpt.latest_step(), 0
    if start is None:
      start = 0
      state = state_lib.create(run.model, tx, example_args, state_shardings, c.seed)
      if c.get("init_from_hf"):  # The optimizer's moments start at zero either way.
        params = hf.import_params(c.init_from_hf, run.model, cfg.model, state.params)
        params = jax.tree.map(lambda new, old: np.asarray(new, old.dtype), params, state.params)
        state = state.replace(params=jax.device_put(params, state_shardings.params))
      writer.truncate_after(-1)  # Records of an earlier attempt that saved no checkpoint.
    else:
      log(f"Resuming from the checkpoint at step {start} in {workdir}/checkpoints")
      state = ckpt.restore(start, state_lib.abstract(run.model, tx, example_args, state_shardings))
      skip_examples = _resume_position(ckpt.restore_data(start), run)
      writer.truncate_after(start)

    train_step = jax.jit(steps.make_train_step(run.model, tx, lr_schedule, cfg.loss, c.get("microbatches", 1)),
                         in_shardings=(state_shardings, batch_sharding),
                         out_shardings=(state_shardings, None), donate_argnums=(0,))
    eval_step = jax.jit(steps.make_eval_step(run.model), in_shardings=(state_shardings.params, batch_sharding))
    eval_sets = _eval_sets(run, batch_sharding)
    train_batches = _batches(run, "train", shuffle=True, repeat=True, skip_examples=skip_examples)
    examples = skip_examples  # Training examples read so far: the data position saved with each checkpoint.
    if start == 0:
      writer.write(0, evaluate_all(eval_step, state.params, eval_sets))

    row = models.row_lengths(run.model, lengths)  # Not the task's lengths: MLM's repeat the row three times.
    tokens_per_step = c.batch_size * sum(row.values())
    step_flops = flops.flops_per_example(state.params, cfg.model, row) * c.batch_size
    peak = flops.matmul_peak(dtype=jnp.dtype(models.activation_dtype(cfg.model.get("dtype", "float32"))))
    profile_start, profile_stop = tuple(c.get("profile_steps", ())) or (None, None)
    tracing = False
    step, saved, latest_eval = start, start, {}
    bar = tqdm.tqdm(total=c.steps, initial=start, unit="step", dynamic_ncols=True,
                    disable=jax.process_index() != 0)
    interval_start, interval_steps = time.perf_counter(), 0
    while step < c.steps and stop.signal is None:
      try:
        local = next(train_batches)
      except StopIteration:
        raise UserError(f"the training data of {run.task} yields no examples; check the data source") from None
      if step == profile_start:
        jax.profiler.start_trace(os.path.join(workdir, "profile"))
        tracing = True
      state, step_metrics = train_step(state, mesh_lib.global_batch(local, batch_sharding))
      if tracing and step + 1 == profile_stop:
        tracing = _stop_trace(step_metrics, workdir)
      if not bool(step_metrics["finite"]):  # The step was not applied: the state is the last good one.
        bar.close()
        ckpt.close()  # Waits for a pending save of a good state.
        kept = f"the checkpoint of step {saved} is intact" if saved else "no checkpoint had been written"
        raise UserError(f"the loss or gradient became NaN or Inf at step {step + 1}; stopped without saving "
                        f"({kept}). Lower "
                        "optimizer.learning_rate or raise optimizer.warmup_steps, then rerun to resume")
      step += 1
      examples += c.batch_size
      interval_steps += 1
      bar.update(1)
      eval_now = step % c.eval_every == 0 or step == c.steps
      if eval_now or step % c.log_every == 0:
        values = {f"train/{k}": float(v) for k, v in jax.device_get(step_metrics).items() if k != "finite"}
        elapsed = time.perf_counter() - interval_start
        values["train/tokens_per_second"] = interval_steps * tokens_per_step / elapsed
        values["train/step_seconds"] = elapsed / interval_steps
        # Model FLOPs utilisation against a matmul peak measured at startup, over all devices.
        values["train/mfu"] = step_flops / values["train/step_seconds"] / (peak * jax.device_count())
        if eval_now:
          latest_eval = {"step": step, **evaluate_all(eval_step, state.params, eval_sets)}
          values.update({k: v for k, v in latest_eval.items() if k != "step"})
        writer.write(step, values)
        bar.set_postfix(loss=f"{values['train/loss']:.3f}", tok_s=f"{values['train/tokens_per_second']:,.0f}")
        interval_start, interval_steps = time.perf_counter(), 0
      if step % c.checkpoint_every == 0 or step == c.steps or stop.signal is not None:
        ckpt.save(step, state, {"task": run.task, "examples": examples, "batch_size": c.batch_size,
                                "processes": jax.process_count()})
        saved = step
    if tracing:  # Stopped before the end of the profiled range.
      _stop_trace(step_metrics, workdir)
    bar.close()
    ckpt.close()

    if stop.signal is not None:
      log(f"Stopped at step {step}; " + (f"the checkpoint of step {saved} is saved. " if saved else "")
          + "Rerun the same command to resume.")
      return {"step": step, "stopped_by": stop.signal}
    final = latest_eval if latest_eval.get("step") == step else evaluate_all(eval_step, state.params, eval_sets)
    final.pop("step", None)
    pairs = samples(run, state.params)
  return _report(run, step, final, pairs)


def _stop_trace(last_outputs, workdir: str) -> bool:
  jax.block_until_ready(last_outputs)
  jax.profiler.stop_trace()
  log(f"Wrote a profiler trace to {workdir}/profile (open it with TensorBoard's profile plugin or xprof)")
  return False


def _report(run: Run, step: int, final: dict, pairs) -> dict:
  records = metrics.read(run.workdir)
  initial = next((r["eval/perplexity"] for r in records if r["step"] == 0 and "eval/perplexity" in r), None)
  if jax.process_index() == 0:
    plot = metrics.plot_losses(run.workdir)
    lines = [f"Trained {step} steps. Validation loss {final['eval/loss']:.3f}, "
             f"perplexity {final['eval/perplexity']:.1f}"
             + (f" (step 0: {initial:.1f}, {initial / final['eval/perplexity']:.0f}x lower)" if initial else "")]
    lines += ["Samples: a validation prompt, then >>> the model's continuation."] if pairs else []
    for i, (prompt, continuation) in enumerate(pairs, 1):
      lines += [f"[{i}] {prompt.rstrip()}", f">>> {continuation.strip()}"]
    lines += [f"Outputs in {run.workdir}: metrics.jsonl, tensorboard/, checkpoints/, config.json, spm.model, "
              f"{os.path.basename(plot)}"]
    print("\n".join(lines), flush=True)
  return {"step": step, **final, "initial_perplexity": initial, "samples": pairs}
