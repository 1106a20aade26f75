import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from pretrain import cli
from pretrain.parallel import mesh as mesh_lib
from pretrain.system.errors import UserError
from pretrain.train import checkpoint, goodput, metrics, optimizer, steps
from tests import numerics
from tests.conftest import REPO, TINY, tiny_config, tiny_run, wait_for_checkpoint

# The model of these step tests: TINY, 16 positions, a short warmup.
STEP_ARGS = ("--config.data.seq_len=16", "--config.optimizer.warmup_steps=2", "--config.train.steps=100")


def _batch(run, rows=4, length=16):
  tokens = np.random.default_rng(0).integers(3, 128, (rows, length + 1)).astype(np.int32)
  local = {"decoder_input_tokens": tokens[:, :-1], "decoder_target_tokens": tokens[:, 1:],
           "decoder_loss_weights": np.ones((rows, length), np.int32),
           "decoder_segment_ids": np.ones((rows, length), np.int32),
           "decoder_positions": np.tile(np.arange(length, dtype=np.int32), (rows, 1))}
  return local if run is None else mesh_lib.global_batch(local, run.batch_sharding)


def _losses(run, num_steps, batch=None):
  state, batch, losses = run.create_state(), batch or _batch(run), []
  with run.activated():
    for _ in range(num_steps):
      state, m = run.train_step(state, batch)
      losses.append(float(m["loss"]))
  return state, losses


def test_steps_reduce_loss_on_a_fixed_batch():
  state, losses = _losses(tiny_run(*STEP_ARGS), 50)
  assert int(state.step) == 50
  assert losses[-1] < 0.5 * losses[0]


@pytest.mark.slow
def test_bfloat16_parameters_store_half_and_still_train():
  runs = {}
  for name in ("float32", "bfloat16"):
    run = tiny_run(*STEP_ARGS, f"--config.model.param_dtype={name}")
    state = run.create_state()
    runs[name] = {"bytes": sum(x.nbytes for x in jax.tree.leaves((state.params, state.opt_state)) if x.ndim),
                  "dtypes": {x.dtype for x in jax.tree.leaves(state.params)}, "losses": _losses(run, 20)[1]}
  assert runs["bfloat16"]["dtypes"] == {jnp.dtype("bfloat16")} and runs["float32"]["dtypes"] == {jnp.dtype("float32")}
  assert runs["bfloat16"]["bytes"] == runs["float32"]["bytes"] // 2  # Parameters and Adam's moments.
  # The first loss, of the parameters rounded once to bfloat16: TINY's layer, then the output layer.
  numerics.assert_close(runs["bfloat16"]["losses"][0], runs["float32"]["losses"][0], terms=2, dtype=jnp.bfloat16)
  assert runs["bfloat16"]["losses"][-1] < 0.7 * runs["bfloat16"]["losses"][0]


def test_bfloat16_activations_give_the_float32_loss():
  """model.dtype=bfloat16, the accelerators' default (auto): the first step's loss on one batch and the same
  parameters is float32's within bfloat16's precision (norms, softmax, logits and loss stay float32)."""
  losses = {name: _losses(tiny_run(*STEP_ARGS, f"--config.model.dtype={name}"), 1)[1][0]
            for name in ("float32", "bfloat16")}
  assert losses["bfloat16"] != losses["float32"]  # It computed in bfloat16 ...
  # ... within its precision: the loss, a float32 mean over the batch's tokens (where the activations' roundings
  # average out), rounded once.
  numerics.assert_close(losses["bfloat16"], losses["float32"], terms=1, dtype=jnp.bfloat16)


def test_checkpoint_round_trip(tmp_path):
  run = tiny_run(*STEP_ARGS, "--config.train.seed=1")
  with run.activated():
    state = run.create_state().replace(step=jnp.asarray(17, jnp.int32))
  saver = checkpoint.Checkpointer(str(tmp_path / "ckpt"), keep=2)
  saver.save(17, state)
  saver.close()
  restorer = checkpoint.Checkpointer(str(tmp_path / "ckpt"), keep=2)
  assert restorer.latest_step() == 17
  restored = run.restore(restorer, 17, "the test checkpoint")
  for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(restored)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert a.sharding == b.sharding


def _steps_logged(workdir):
  return [r["step"] for r in metrics.read(str(workdir)) if "train/loss" in r]


@pytest.mark.slow
def test_train_resume_and_continue(tmp_path, run_train):
  workdir = tmp_path / "run"
  first = run_train(workdir, "--config.train.steps=3", "--config.train.eval_every=2", "--config.train.keep_steps=(2,)",
                    "--config.train.keep_checkpoints=1", "--config.optimizer.warmup_steps=1")
  assert first.returncode == 0, first.stderr
  assert "Trained 3 steps" in first.stdout and "perplexity" in first.stdout
  # Its perplexity against step 0's, as the ratio of the two figures printed (a whole number was '1x lower').
  final, initial, ratio, way = re.search(r"perplexity ([\d.]+) \(step 0: ([\d.]+), (\d+\.\d)x (lower|higher)\)",
                                         first.stdout).groups()
  assert abs(float(ratio) - max(float(initial), float(final)) / min(float(initial), float(final))) <= 0.051
  assert way == ("lower" if float(final) <= float(initial) else "higher")
  # TINY's train.eval_batches=2: the summary says its loss is of those batches, not of the whole split.
  assert "; on 2 batches of the validation split (at most train.eval_batches" in first.stdout
  for output in ("metrics.jsonl", "curves.png", "config.json", "checkpoints/3", "tensorboard"):
    assert os.path.exists(workdir / output), output
  records = metrics.read(str(workdir))
  assert records[0]["step"] == 0 and "eval/perplexity" in records[0]
  assert {"train/loss", "train/tokens_per_second", "eval/loss"} <= set(records[2])
  # The first record's rates leave out compiling the step: its step time is a step's, not the compile's.
  compiled = goodput.read(str(workdir))["attempts"][0]["compile"]
  assert records[1]["train/step_seconds"] < compiled / 2, (records[1], compiled)

  position = checkpoint.Checkpointer(str(workdir / "checkpoints"), keep=2).restore_data(3)  # The data item.
  assert position["task"] == "corpus_clm" and position["streams"] == [{"rows": 3 * 4, "members": [[0, 12]]}]

  # Continued with a larger batch: the data position counts rows, so it goes on from the 13th. The vocabulary,
  # given by path now, is the run's by its contents.
  shutil.copy(workdir / "spm.model", tmp_path / "own.model")
  more = run_train(workdir, "--config.train.steps=6", "--config.train.eval_every=3", "--config.train.log_every=2",
                   "--config.train.batch_size=8", "--config.train.keep_checkpoints=1",
                   "--config.optimizer.warmup_steps=1", f"--config.tokenizer.path={tmp_path / 'own.model'}")
  assert more.returncode == 0, more.stderr
  assert "Resuming from the checkpoint at step 3" in more.stdout + more.stderr
  said = next(line for line in more.stdout.splitlines() if line.startswith("Resuming with another config"))
  assert "train.batch_size 4 -> 8" in said and "train.steps 3 -> 6" in said and "tokenizer.path '' -> " in said
  assert "the learning rate at step 3 " in said  # A longer cosine schedule is at another point of its decay.
  # Its command line leaves out train.keep_steps, which the first run's checkpoints recorded: step 2 stays kept.
  assert sorted(checkpoint.Checkpointer(str(workdir / "checkpoints"), keep=1).manager.all_steps()) == [2, 6]
  assert "Keeping the checkpoints of steps 2 (train.keep_steps of this run's earlier" in more.stdout + more.stderr
  assert checkpoint.Checkpointer(str(workdir / "checkpoints"), keep=2).restore_data(6)["streams"][0]["rows"] == 12 + 3 * 8
  # Logged every step up to 3, then every 2 steps and at each evaluation (every 3) to 6.
  assert _steps_logged(workdir) == [1, 2, 3, 4, 6]
  assert [r["step"] for r in metrics.read(str(workdir)) if "eval/loss" in r] == [0, 2, 3, 6]


@pytest.mark.slow
def test_one_run_per_workdir_and_a_killed_runs_lock_is_stale(tmp_path, run_train):
  workdir = tmp_path / "run"
  first = run_train(workdir, "--config.train.steps=100000", "--config.train.checkpoint_every=2",
                    start_new_session=True)
  wait_for_checkpoint(first, workdir, 2)
  second = run_train(workdir, "--config.train.steps=3", "--config.train.seed=1")
  assert second.returncode == 2 and "Traceback" not in second.stderr
  last = second.stderr.strip().splitlines()[-1]
  assert f"in use by the run of pid {first.pid} on host" in last and "run.lock" in last, last
  assert json.loads((workdir / "run.lock").read_text())["pid"] == first.pid  # Still the first run's.
  first.kill()
  first.communicate()
  saved = checkpoint.Checkpointer(str(workdir / "checkpoints"), keep=2).latest_step()
  rerun = run_train(workdir, f"--config.train.steps={saved + 1}")  # The dead run's lock does not block it.
  assert rerun.returncode == 0, rerun.stderr
  assert f"Resuming from the checkpoint at step {saved}" in rerun.stdout + rerun.stderr
  assert not (workdir / "run.lock").exists()


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["SIGINT, its messages' reader gone first", "its output's readers gone"])
def test_a_stop_checkpoints_and_rerun_resumes(tmp_path, run_train, stop, monkeypatch):
  """Ctrl-C (SIGINT; SIGTERM: test_resume_after_a_kill_is_bit_identical) saves and stops, also where its message
  cannot be printed (a `| tee` that the same Ctrl-C ended); so does the output's reader going away (`| head`): the
  step bar's next write fails, and the run stops as on SIGPIPE, at a checkpoint (pretrain/system/console.py)."""
  workdir = tmp_path / "run"
  monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)  # Its stdout a pipe, as a shell's: Python buffers it.
  process = run_train(workdir, "--config.train.steps=100000", "--config.train.checkpoint_every=100000",
                      start_new_session=True)
  deadline = time.time() + 300
  while len(_steps_logged(workdir)) < 3:
    assert process.poll() is None, process.communicate()
    assert time.time() < deadline
    time.sleep(0.5)
  process.stdout.close()
  if stop.startswith("SIGINT"):
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGINT and "Traceback" not in stderr, stderr
  else:
    process.stderr.close()
    assert process.wait(timeout=120) == 128 + signal.SIGPIPE
  saved = checkpoint.Checkpointer(str(workdir / "checkpoints"), keep=2).latest_step()
  assert saved is not None and saved >= 3
  rerun = run_train(workdir, f"--config.train.steps={saved + 2}")
  assert rerun.returncode == 0, rerun.stderr
  assert f"Resuming from the checkpoint at step {saved}" in rerun.stdout + rerun.stderr
  assert _steps_logged(workdir)[-3:] == [saved, saved + 1, saved + 2]


@pytest.mark.slow
def test_ctrl_c_while_starting_ends_the_run_at_once_and_a_second_one_while_it_saves(tmp_path, cache_dir, vocabulary):
  """No traceback and no crash: Ctrl-C or SIGTERM (a preemption) before the training loop (the data, a
  compilation) ends the process at once; in the loop the first Ctrl-C asks for a checkpoint, a second ends the
  process at once."""
  del vocabulary
  env = {**os.environ, "PRETRAIN_CACHE": cache_dir, "PYTHONUNBUFFERED": "1"}

  def start(workdir):
    return subprocess.Popen([sys.executable, "-m", "pretrain", "train", f"--workdir={workdir}", *TINY,
                             "--config.train.steps=100000", "--config.train.checkpoint_every=100000"], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            # As a terminal starts it: a test runner's worker may ignore SIGINT, and its children
                            # would inherit that (the command keeps an ignored Ctrl-C ignored, as a background job).
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

  starting = start(tmp_path / "starting")
  time.sleep(2)
  starting.send_signal(signal.SIGINT)
  output, _ = starting.communicate(timeout=60)
  assert starting.returncode == -signal.SIGINT and "Traceback" not in output, output[-3000:]
  preempted = start(tmp_path / "preempted")
  deadline = time.time() + 120
  while not (tmp_path / "preempted" / "run.lock").exists():  # JAX has started (and libtpu, where installed).
    assert preempted.poll() is None and time.time() < deadline
    time.sleep(0.05)
  time.sleep(0.5)  # Building the data and the model, seconds before the loop handles SIGTERM itself.
  # Nothing catches SIGTERM (the kernel's list of the signals a handler catches): libtpu's failure handler there
  # printed a native stack dump, unless the signal came while TensorFlow's import had stderr closed.
  caught = int(next(line for line in open(f"/proc/{preempted.pid}/status") if line.startswith("SigCgt:")).split()[1],
               16)
  preempted.send_signal(signal.SIGTERM)
  output, _ = preempted.communicate(timeout=60)
  assert not caught >> (signal.SIGTERM - 1) & 1, output[-3000:]
  assert preempted.returncode == -signal.SIGTERM and "stack trace" not in output, output[-3000:]
  training = start(tmp_path / "training")
  deadline = time.time() + 300
  while len(_steps_logged(tmp_path / "training")) < 2:
    assert training.poll() is None and time.time() < deadline
    time.sleep(0.5)
  training.send_signal(signal.SIGINT)
  for line in training.stdout:
    if "Received SIGINT: saving a checkpoint" in line:
      training.send_signal(signal.SIGINT)
      break
  output, _ = training.communicate(timeout=60)
  assert training.returncode == -signal.SIGINT and "Traceback" not in output, output[-3000:]


@pytest.mark.slow
def test_resume_with_another_model_is_refused(tmp_path, run_train):
  """With config.json, another width or family is refused by name (tests/test_bad_inputs.py); without it, by the
  config its checkpoint recorded, and nothing is written; the checkpoint's own shapes refuse it too (checkpoints
  written before they recorded their config). Rematerialising, dropout or the compute dtype may change."""
  from pretrain import run as run_lib  # pylint: disable=g-import-not-at-top
  workdir = tmp_path / "run"
  assert run_train(workdir, "--config.train.steps=1").returncode == 0
  saved = (workdir / "config.json").read_bytes()
  (workdir / "config.json").unlink()
  wider = run_train(workdir, "--config.train.steps=2", "--config.model.d_model=48")
  assert wider.returncode == 2 and "holds checkpoints of a run with model.d_model=32, not 48" in wider.stderr
  assert not (workdir / "config.json").exists()
  saver = checkpoint.Checkpointer(str(workdir / "checkpoints"), 1, move_aside=False)
  with pytest.raises(UserError, match="the checkpoint and its config do not belong together"):
    run_lib.Run.build(tiny_config("--config.model.d_model=48")).restore(saver, 1, "the checkpoint")
  saver.close()
  (workdir / "config.json").write_bytes(saved)
  # The run resumes, and what only says how a step computes may change: rematerialising is the usual answer to
  # running out of memory.
  rerun = run_train(workdir, "--config.train.steps=2", "--config.model.remat=full", "--config.model.dropout=0.1",
                    "--config.model.dtype=float32")
  shown = rerun.stdout + rerun.stderr
  assert rerun.returncode == 0 and "Resuming from the checkpoint at step 1" in shown, shown[-2000:]
  assert "model.remat 'none' -> 'full'" in shown


@pytest.mark.slow
def test_loss_normalizing_factor_scales_the_gradients():
  tokens = 4 * 16  # Weighted target tokens in _batch().
  norms = {}
  for factor in (0.0, float(tokens), 2.0 * tokens):
    run = tiny_run(*STEP_ARGS, f"--config.loss.normalizing_factor={factor}")
    with run.activated():
      state = run.create_state()
      norms[factor] = float(run.train_step(state, _batch(run))[1]["grad_norm"])
  # The gradients, then the norm's sum of their squares.
  terms = numerics.gradient_terms(run.model.config, 4, 16) + sum(x.size for x in jax.tree.leaves(state.params))
  numerics.assert_close(norms[float(tokens)], norms[0.0], terms=terms)
  numerics.assert_close(norms[2.0 * tokens], norms[0.0] / 2, terms=terms)


@pytest.mark.slow
def test_train_with_scanned_rematerialised_layers(tmp_path, run_train):
  result = run_train(tmp_path / "run", "--config.train.steps=2", "--config.model.scan_layers=true",
                     "--config.model.remat=save_dots", "--config.model.num_layers=2")
  assert result.returncode == 0, result.stderr
  assert "Trained 2 steps" in result.stdout


def _one_step(*args, batch):
  run = tiny_run(*STEP_ARGS, *args)
  with run.activated():
    return run.train_step(run.create_state(), mesh_lib.global_batch(batch, run.batch_sharding))


@pytest.mark.slow
def test_gradient_accumulation_over_four_microbatches_matches_the_full_batch():
  batch = _batch(None, rows=8)
  batch["decoder_loss_weights"][:, -5:] = 0  # Uneven weights: the loss is normalised over the whole batch.
  batch["decoder_loss_weights"][0, :] = 0
  full_state, full = _one_step("--config.train.batch_size=8", batch=batch)
  micro_state, micro = _one_step("--config.train.batch_size=8", "--config.train.microbatches=4", batch=batch)
  # The gradients of 8 rows of 16 tokens summed in another order, the norm's sum of their squares; the parameters
  # after one AdamW step, each of learning_rate's size at most.
  run, params = tiny_run(*STEP_ARGS, "--config.train.batch_size=8"), jax.tree.leaves(full_state.params)
  terms = numerics.gradient_terms(run.model.config, 8, 16) + sum(x.size for x in params)
  for key in ("loss", "grad_norm", "accuracy"):
    numerics.assert_close(float(micro[key]), float(full[key]), terms=terms, err_msg=key)
  for a, b in zip(params, jax.tree.leaves(micro_state.params)):
    numerics.assert_close(b, a, terms=terms, magnitude=float(np.abs(a).max()) + run.cfg.optimizer.learning_rate)


def test_microbatches_take_rows_from_every_block():
  rows = {"x": np.arange(8)}
  np.testing.assert_array_equal(np.asarray(steps.microbatches(rows, 4)["x"]), [[0, 4], [1, 5], [2, 6], [3, 7]])


def test_a_step_with_a_non_finite_loss_changes_nothing():
  run = tiny_run(*STEP_ARGS)
  with run.activated():
    state = run.create_state()
    state = state.replace(params=jax.tree.map(lambda p: p * jnp.nan, state.params))  # As a diverged run's.
    before = jax.device_get(state)  # The step donates its input state.
    after, metrics_ = run.train_step(state, mesh_lib.global_batch(_batch(None), run.batch_sharding))
  assert not bool(metrics_["finite"])
  for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(jax.device_get(after))):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.slow
def test_nan_loss_stops_the_run_and_keeps_the_last_checkpoint(tmp_path, run_train):
  diverging = ("--config.train.steps=30", "--config.optimizer.learning_rate=1e12",
               "--config.optimizer.warmup_steps=10", "--config.optimizer.grad_clip=1e30")
  # Warmup starts at learning rate 0, so the first step is good and saved; then the parameters explode.
  result = run_train(tmp_path / "saved", *diverging, "--config.train.checkpoint_every=1")
  assert result.returncode == 2, result.stderr
  failed_step = int(re.search(r"became NaN or Inf at step (\d+)", result.stderr).group(1))
  saved = sorted(int(p) for p in os.listdir(tmp_path / "saved" / "checkpoints") if p.isdigit())
  assert saved[-1] == failed_step - 1 and f"the checkpoint of step {saved[-1]} is intact" in result.stderr
  # Nothing to save or log: each step's guard is read once the next step is queued, and names the same step.
  result = run_train(tmp_path / "lagged", *diverging, "--config.train.checkpoint_every=1000",
                     "--config.train.log_every=1000", "--config.train.eval_every=1000")
  assert result.returncode == 2, result.stderr
  assert f"became NaN or Inf at step {failed_step}; stopped without saving (no checkpoint had been written)" in (
      result.stderr)
  assert not os.path.exists(tmp_path / "lagged" / "checkpoints") or not os.listdir(tmp_path / "lagged" / "checkpoints")


def test_weight_decay_skips_norm_scales_also_when_scanned():
  params = {"layers": {"norm": {"scale": jnp.ones((4, 8))}, "mlp": {"kernel": jnp.ones((4, 8, 8))}},
            "embed": {"embedding": jnp.ones((16, 8))}, "final_norm": {"scale": jnp.ones(8)}}
  assert optimizer.decay_mask(params) == {"layers": {"norm": {"scale": False}, "mlp": {"kernel": True}},
                                          "embed": {"embedding": True}, "final_norm": {"scale": False}}


def test_adamw_s_epsilon_is_the_config_s():
  cfg = tiny_run(*STEP_ARGS).cfg
  grads = {"w": jnp.full((2, 2), 1e-3)}
  steps_of = {}
  for eps in (1e-8, 1e-2):
    cfg.optimizer.eps, cfg.optimizer.weight_decay, cfg.optimizer.warmup_steps = eps, 0.0, 0
    transform = optimizer.make(cfg.optimizer, 10)
    updates, _ = transform.update(grads, transform.init(grads), grads)
    steps_of[eps] = float(jnp.abs(updates["w"]).max())
  assert steps_of[1e-2] < 0.2 * steps_of[1e-8]  # |g| / (|g| + eps): 1e-3 / (1e-3 + 1e-2) of the full step.


def test_adafactor_s_weight_decay_is_scaled_by_the_learning_rate_as_adamw_s():
  """With no gradient, one step of decay 0.1 at a learning rate of 0.01 takes 0.1% of a weight matrix (it took 10%
  when optax's Adafactor added the decay after the learning rate), and leaves norm scales."""
  cfg = tiny_run(*STEP_ARGS).cfg
  cfg.optimizer.learning_rate, cfg.optimizer.weight_decay, cfg.optimizer.warmup_steps = 0.01, 0.1, 0
  params = {"w": jnp.ones((4, 4)), "norm": {"scale": jnp.ones((4, 4))}}
  zeros = jax.tree.map(jnp.zeros_like, params)
  for name in ("adamw", "adafactor"):
    cfg.optimizer.name = name
    transform = optimizer.make(cfg.optimizer, 10)
    updates, _ = transform.update(zeros, transform.init(params), params)
    stepped = optax.apply_updates(params, updates)
    numerics.assert_close(float(stepped["w"][0, 0]), 1 - 0.01 * 0.1, terms=4)
    assert float(stepped["norm"]["scale"][0, 0]) == 1.0


def test_adafactor_measures_each_scanned_layer_on_its_own_as_t5x():
  """A stack of three layers of very different scales steps as each layer alone would (T5X's Adafactor takes the
  'layers' axis as a batch axis): the clipping and the parameter's scale are each layer's. optax's Adafactor, which
  measures the whole stack, is the same for a parameter without such an axis."""
  cfg = tiny_run(*STEP_ARGS).cfg
  cfg.optimizer.name, cfg.optimizer.weight_decay, cfg.optimizer.warmup_steps = "adafactor", 0.0, 0
  cfg.optimizer.grad_clip = 0.0  # The global norm's clipping is the whole tree's by design.
  scales = jnp.array([0.01, 1.0, 100.0])[:, None, None]
  stack = {"w": scales * jax.random.normal(jax.random.key(0), (3, 8, 256))}
  grads = {"w": scales * jax.random.normal(jax.random.key(1), (3, 8, 256))}
  stacked = optimizer.make(cfg.optimizer, 10, {"w": ("layers", "embed", "mlp")})
  updates, _ = stacked.update(grads, stacked.init(stack), stack)
  alone = optimizer.make(cfg.optimizer, 10, {"w": ("embed", "mlp")})
  for layer in range(3):
    layer_of = lambda tree: {"w": tree["w"][layer]}  # pylint: disable=cell-var-from-loop
    expected, _ = alone.update(layer_of(grads), alone.init(layer_of(stack)), layer_of(stack))
    numerics.assert_close(updates["w"][layer], expected["w"], terms=8 * 256)
  plain = optax.adafactor(optimizer.schedule(cfg.optimizer, 10), decay_rate=0.8, clipping_threshold=1.0,
                          multiply_by_parameter_scale=True)
  numerics.assert_close(alone.update(layer_of(grads), alone.init(layer_of(stack)), layer_of(stack))[0],
                        plain.update(layer_of(grads), plain.init(layer_of(stack)), layer_of(stack))[0], terms=8 * 256)
  assert jax.tree.structure(stacked.init(stack)[-1]) == jax.tree.structure(plain.init(stack))  # Checkpoints resume.


def test_adafactor_and_the_rsqrt_schedule():
  cfg = tiny_run(*STEP_ARGS).cfg
  cfg.optimizer.name, cfg.optimizer.schedule, cfg.optimizer.learning_rate = "adafactor", "rsqrt", 0.01
  cfg.optimizer.warmup_steps = 100
  lr = optimizer.schedule(cfg.optimizer, 1000)
  numerics.assert_close([float(lr(s)) for s in (0, 100, 400, 10_000)], [0.01, 0.01, 0.005, 0.001],
                        terms=4)  # A schedule's few float32 operations, element by element.
  # Adafactor's steps are relative to each parameter's scale.
  run = tiny_run(*STEP_ARGS, "--config.optimizer.name=adafactor", "--config.optimizer.schedule=rsqrt",
                 "--config.optimizer.learning_rate=0.3", "--config.optimizer.warmup_steps=100",
                 "--config.train.steps=1000")
  _, losses = _losses(run, 31)
  assert losses[-1] < 0.8 * losses[0]
  cfg.optimizer.name = "sgd"
  with pytest.raises(UserError, match="optimizer.name='sgd' is unknown"):
    optimizer.make(cfg.optimizer, 10)


def _train_losses(workdir):
  return {r["step"]: r["train/loss"] for r in metrics.read(str(workdir)) if "train/loss" in r}


# A mixture-of-experts model with router jitter: its random draws too must be the same after a resume. The loss-spike
# guard is on, with a spike injected at data batch 70 (step 71): it rolls back to step 60, past batches 60-70, with
# half the learning rate for 10 steps; the kills land before, during and after that rollback.
_MOE = ("--config.model.moe_experts=4", "--config.model.moe_router_jitter=0.1")
_GUARD = ("--config.train.spike_guard=True", "--config.train.spike_window=16", "--config.train.spike_threshold=50",
          "--config.train.spike_test_batches=(70,)", "--config.train.spike_lr_factor=0.5",
          "--config.train.spike_lr_steps=10")
_KILLED_RUN = ("--config.train.steps=160", "--config.train.checkpoint_every=20", "--config.train.eval_every=40",
               *_MOE, *_GUARD)


@pytest.fixture(scope="module")
def uninterrupted(run_train, tmp_path_factory):
  """The workdir of _KILLED_RUN run without a stop, for every kill to compare with."""
  workdir = tmp_path_factory.mktemp("straight")
  straight = run_train(workdir, *_KILLED_RUN)
  assert straight.returncode == 0, straight.stderr
  return workdir


@pytest.fixture(scope="module")
def uninterrupted_losses(uninterrupted):
  return _train_losses(uninterrupted)


@pytest.mark.slow
def test_the_spike_guard_skips_the_spike_and_rolls_back_past_its_batches(uninterrupted):
  records = metrics.read(str(uninterrupted))
  assert [r["step"] for r in records if "train/loss" in r] == list(range(1, 161))  # The window's records rewritten.
  rolled = [r for r in records if "train/rollback_from_step" in r]
  assert len(rolled) == 1 and rolled[0]["step"] == 61
  assert (rolled[0]["train/rollback_from_step"], rolled[0]["train/rollback_to_step"],
          rolled[0]["train/skipped_batches"], rolled[0]["train/spikes"]) == (71, 60, 11, 1)
  assert all(r["train/rollbacks"] == (r["step"] > 60) for r in records if "train/loss" in r)
  assert all(r["train/loss"] < 20 for r in records if "train/loss" in r)  # The spike was never applied.
  # Half the scheduled learning rate for the 10 steps after the rollback, then the schedule's.
  schedule = optimizer.schedule(tiny_config(*_KILLED_RUN).optimizer, 160)
  for r in records:
    if "train/learning_rate" in r:
      lowered = 0.5 if 61 <= r["step"] <= 70 else 1.0
      numerics.assert_close(r["train/learning_rate"], lowered * float(schedule(r["step"] - 1)),
                            terms=8)  # A schedule's few float32 operations, then the lowering's product.
  # The data read on past the window: 160 steps and the 11 skipped batches, in the final checkpoint's position.
  ckpt = checkpoint.Checkpointer(str(uninterrupted / "checkpoints"), keep=2)
  assert [s["rows"] for s in ckpt.restore_data(160)["streams"]] == [171 * 4]
  guard = ckpt.restore_guard(160)
  assert guard["rollbacks"] == [{"step": 71, "to": 60, "batches": [60, 70]}] and guard["arrays"]["skipped"] == 11
  ckpt.close()


@pytest.mark.slow
def test_goodput_of_a_run_that_rolled_back(uninterrupted, capsys):
  """One attempt: its rolled-back steps are not productive; `pretrain goodput` reads the account."""
  account = goodput.summary(goodput.read(str(uninterrupted)))
  seconds = account["seconds"]
  assert account["attempts"] == 1 and seconds["rolled back"] > 0 and seconds["recomputed after restarts"] == 0
  assert goodput.read(str(uninterrupted))["attempts"][0]["finished"]  # It ran to train.steps.
  assert seconds["startup"] > 0 and seconds["compile"] > 0 and seconds["eval"] > 0
  assert sum(seconds.values()) == pytest.approx(account["wall"])
  assert 0 < account["goodput"] < 1
  logged = [r["train/goodput"] for r in metrics.read(str(uninterrupted)) if "train/goodput" in r]
  assert len(logged) == 160 and all(0 <= g < 1 for g in logged)
  assert cli.main(["goodput", f"--workdir={uninterrupted}"]) == 0
  table = capsys.readouterr().out
  assert "productive steps" in table and "rolled back" in table and "over 1 attempt(s)" in table


def _tensorboard(workdir, tag: str) -> list[tuple[int, float]]:
  """(step, value) of each of a scalar's events in the run's tensorboard/, in the order TensorBoard reads them."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return [(event.step, float(tf.make_ndarray(value.tensor)))
          for path in sorted(glob.glob(str(workdir / "tensorboard" / "events.out.tfevents.*")))
          for event in tf.compat.v1.train.summary_iterator(path) for value in event.summary.value if value.tag == tag]


def test_the_time_after_a_finished_run_until_it_is_extended_is_not_downtime():
  """A run trained to its train.steps and extended by a higher one an hour later: the hour is no one's downtime,
  nor in the wall time; after a killed attempt the same hour is the job down."""
  attempt = lambda started, updated, **more: {"started": started, "updated": updated, "steps": [0, 1],
                                              **dict.fromkeys(goodput.PHASES, 1.0), **more}
  record = {"run": "0123456789ab", "ledger": {"0": 0.0}, "clock": 2.0, "recomputed": 0.0, "rolled_back": 0.0,
            "attempts": [attempt(0.0, 10.0, finished=True), attempt(3610.0, 3620.0)]}
  finished = goodput.summary(record)
  assert finished["wall"] == 20.0 and finished["seconds"]["between attempts"] == 0.0 and finished["goodput"] == 0.1
  del record["attempts"][0]["finished"]
  killed = goodput.summary(record)
  assert killed["wall"] == 3620.0 and killed["seconds"]["between attempts"] == 3600.0


@pytest.mark.slow
@pytest.mark.parametrize("kill", ["SIGKILL during the rollback", "SIGTERM at a checkpoint"])
def test_resume_after_a_kill_is_bit_identical(tmp_path, run_train, uninterrupted_losses, kill):
  """SIGKILL as the guard logs the spike (the rollback under way), or SIGTERM (a save and a stop) after a seeded
  checkpoint before or after the rollback: the rerun resumes to the losses of the run that was not stopped."""
  args, expected = _KILLED_RUN, uninterrupted_losses
  workdir = tmp_path / "killed"
  started = time.time()
  process = run_train(workdir, *args, start_new_session=True)
  if kill.startswith("SIGKILL"):
    for line in process.stdout:  # The guard's lines; the rollback follows the spike's.
      if "the loss spiked" in line:
        break
    # The rollback first waits for the checkpoint of step 60 to commit: on a loaded machine its save can still be
    # under way (a kill then resumes from step 40, as a clean test of 4 workers once saw). The kill comes once it
    # has, within the rollback.
    wait_for_checkpoint(process, workdir, 60, timeout=120)
    kill_signal = signal.SIGKILL
  else:
    rng = np.random.default_rng(int(signal.SIGTERM))  # Seeded: a failure reproduces with the same kill point.
    target = int(rng.choice([40, 60, 80, 100]))
    wait_for_checkpoint(process, workdir, target)
    time.sleep(rng.uniform(0, 0.2))  # Somewhere after that checkpoint.
    kill_signal = signal.SIGTERM
  process.send_signal(kill_signal)
  process.communicate(timeout=120)
  assert process.returncode in (-signal.SIGKILL, 128 + signal.SIGTERM)
  resumed = run_train(workdir, *args, start_new_session=True)
  out = ""
  for line in resumed.stdout:  # Up to its last line, the goodput's (then the interpreter ends, unaccounted).
    out += line
    if line.startswith("Goodput"):
      break
  ended = time.time()
  rest, err = resumed.communicate(timeout=120)
  out += rest
  assert resumed.returncode == 0, err
  start = int(out.split("Resuming from the checkpoint at step ")[1].split()[0])
  account = goodput.summary(goodput.read(str(workdir)))
  # Both attempts' phases (and the time between them) add up to the wall time; the steps that the killed
  # attempt ran past its checkpoint were recomputed, and the rollback's discarded.
  assert account["attempts"] == 2 and account["wall"] == pytest.approx(ended - started, rel=0.03)
  if kill_signal == signal.SIGKILL:
    assert start == 60 and "Rolled back to the checkpoint of step 60" in out
    assert account["seconds"]["recomputed after restarts"] > 0 and account["seconds"]["rolled back"] > 0
  losses = _train_losses(workdir)
  assert sorted(losses) == list(range(1, 161))
  assert [losses[s] for s in range(start + 1, 161)] == [expected[s] for s in range(start + 1, 161)]
  # TensorBoard holds each step once, as metrics.jsonl (the killed attempt's steps past the checkpoint are gone).
  board = _tensorboard(workdir, "train/loss")
  assert [step for step, _ in board] == list(range(1, 161))
  assert [value for _, value in board] == pytest.approx([losses[s] for s in range(1, 161)], rel=1e-6)


@pytest.mark.slow
def test_dropout_draws_the_same_masks_after_a_resume(tmp_path, run_train, uninterrupted_losses):
  args = ["--config.model.dropout=0.1", "--config.train.checkpoint_every=2", *_MOE]
  assert run_train(tmp_path / "straight", *args, "--config.train.steps=4").returncode == 0
  shutil.copytree(tmp_path / "straight", tmp_path / "resumed")  # The run as it stood at its checkpoint of step 2.
  shutil.rmtree(tmp_path / "resumed" / "checkpoints" / "4")
  resumed = run_train(tmp_path / "resumed", *args, "--config.train.steps=4")
  assert resumed.returncode == 0 and "Resuming from the checkpoint at step 2" in resumed.stdout + resumed.stderr
  straight = _train_losses(tmp_path / "straight")
  assert _train_losses(tmp_path / "resumed") == straight
  assert uninterrupted_losses[1] != straight[1]  # Dropout was on: the same first batch, without it, differs.


@pytest.mark.slow
def test_profile_mfu_and_checkpoints_every_few_minutes(tmp_path, run_train):
  """One run: a profiled range, MFU in the metrics, and train.checkpoint_every_minutes (so short here that every
  logged step saves, where train.checkpoint_every alone would save only the last)."""
  workdir = tmp_path / "run"
  result = run_train(workdir, "--config.train.steps=4", "--config.train.profile_steps=(1, 3)",
                     "--config.train.checkpoint_every_minutes=1e-9")
  assert result.returncode == 0, result.stderr
  traces = [f for _, _, files in os.walk(workdir / "profile") for f in files if f.endswith(".xplane.pb")]
  assert traces
  logged = [r for r in metrics.read(str(workdir)) if "train/mfu" in r]
  assert logged and all(0 < r["train/mfu"] < 1 and 0 <= r["train/data_wait_fraction"] < 1 for r in logged)
  assert sorted(int(p.name) for p in (workdir / "checkpoints").iterdir()) == [3, 4]  # train.keep_checkpoints=2


_CRASH_DURING_SAVE = """
import os, signal, sys
from pretrain.train import checkpoint
save = checkpoint.Checkpointer.save
def save_then_crash(self, step, *args):
  save(self, step, *args)  # Starts writing in the background ...
  if step == 4:
    os.kill(os.getpid(), signal.SIGKILL)  # ... and the process dies before the write completes.
checkpoint.Checkpointer.save = save_then_crash
from pretrain.commands.train import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_crash_while_saving_leaves_the_previous_checkpoint_usable(tmp_path, run_train, cache_dir):
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  from tests.conftest import REPO, TINY  # pylint: disable=g-import-not-at-top
  workdir = tmp_path / "run"
  args = [f"--workdir={workdir}", "--config=configs/quickstart.py", *TINY, "--config.train.steps=6",
          "--config.train.checkpoint_every=2"]
  crashed = subprocess.run([sys.executable, "-c", _CRASH_DURING_SAVE, *args], cwd=REPO, capture_output=True,
                           text=True, env={**os.environ, "PRETRAIN_CACHE": cache_dir})
  assert crashed.returncode == -signal.SIGKILL
  entries = os.listdir(workdir / "checkpoints")
  assert "2" in entries and "4" not in entries, entries  # Step 4 was never completed under its final name.
  resumed = run_train(workdir, "--config.train.steps=6", "--config.train.checkpoint_every=2")
  assert resumed.returncode == 0, resumed.stderr
  assert "Resuming from the checkpoint at step 2" in resumed.stdout + resumed.stderr
  assert sorted(int(e) for e in os.listdir(workdir / "checkpoints") if e.isdigit()) == [4, 6]


@pytest.mark.slow
def test_evaluation_on_several_objectives(tmp_path, run_train):
  workdir = tmp_path / "run"
  result = run_train(workdir, "--config.train.steps=2", "--config.data.eval_objectives=('prefix_lm_decoder', 'fim')",
                     "--config.data.inputs_length=16", "--config.data.targets_length=16")  # The rows of 32 trained.
  assert result.returncode == 0, result.stderr
  evaluated = [r for r in metrics.read(str(workdir)) if "eval/loss" in r]
  assert [r["step"] for r in evaluated] == [0, 2]
  for record in evaluated:
    for task in ("corpus_prefix_lm_decoder", "corpus_fim"):
      assert record[f"eval/{task}/loss"] > 0 and 0 <= record[f"eval/{task}/accuracy"] <= 1
  bad = run_train(tmp_path / "bad", "--config.data.eval_objectives=('span_corruption',)")
  assert bad.returncode == 2 and "evaluate objectives of the trained family" in bad.stderr


def test_a_run_shorter_than_its_warmup_says_so():
  cfg = tiny_run().cfg
  assert optimizer.warmup_note(cfg.optimizer, 300) is None  # The quickstart: 40 warm-up steps of 300.
  note = optimizer.warmup_note(cfg.optimizer, 30)
  assert "optimizer.warmup_steps=40 is not shorter than train.steps=30" in note
  assert "rises to 0.73 of optimizer.learning_rate=0.003" in note  # 29 / 40 at the 30th step and "warmup_steps=3" in note


def test_mfu_never_exceeds_one_when_the_first_peak_was_measured_on_a_busy_machine():
  from pretrain.train import flops  # pylint: disable=g-import-not-at-top
  measured = iter([100.0, 150.0, 400.0])  # Busy at start-up, then less so.
  peak = flops.Peak(lambda: next(measured))
  assert peak.mfu(50.0) == 0.5 and peak.remeasured == 0
  assert peak.mfu(200.0) == 1.0 and peak.value == 200.0  # Measured again (150): the steps' own rate bounds it.
  assert peak.mfu(300.0) == 0.75 and peak.value == 400.0
  assert peak.mfu(200.0) == 0.5  # The best measurement stays.
  measured = iter([100.0, 90.0])
  first = flops.Peak(lambda: next(measured), key="test")
  assert first.mfu(50.0) == 0.5
  later = flops.Peak(lambda: next(measured), key="test")  # A later run of the process: the best so far, unmeasured.
  assert later.value == 100.0 and next(measured) == 90.0
