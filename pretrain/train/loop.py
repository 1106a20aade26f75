"""The training loop: train a built run (pretrain.run) to train.steps, evaluating, logging and checkpointing.

Resumes from the workdir's latest checkpoint; SIGTERM or Ctrl-C saves a
checkpoint at the current step and stops.
"""

import contextlib
import os
import time

import jax
import numpy as np
import tqdm

from pretrain.data import schedule
from pretrain.parallel import mesh as mesh_lib
from pretrain.system.console import log
from pretrain.system.errors import UserError
from pretrain.train import evaluation, flops, goodput, metrics, optimizer, report, sampling, signals, spike_guard


def train(run, workdir: str, ckpt, state, start: int, train_batches, account, extra_eval=None,
          initial_state=None) -> dict:
  """Trains `state` (at step `start`; 0 for a new run) on `train_batches` (Run.train_batches) to `train.steps`,
  saving with `ckpt` and writing metrics and plots to `workdir`, and returns a summary. `account`: the run's
  goodput (pretrain/train/goodput.py), marked as each phase ends. `extra_eval`: an
  evaluation of the parameters beyond the validation loss (its `every` steps and at the end; called with the
  parameters and the step, it returns metrics to log), e.g. lm-eval's tasks (train.harness_tasks).
  `initial_state`: () -> the run's initial state, where train.spike_guard rolls back before its first checkpoint."""
  cfg, c = run.cfg, run.cfg.train
  if start:
    log(f"Resuming from the checkpoint at step {start} in {workdir}/checkpoints")
  short = optimizer.warmup_note(cfg.optimizer, c.steps)
  if short:
    log(short)
  if run.pipeline:
    log(run.pipeline.describe())
  if len(run.schedule.members) > 1:
    log("The data schedule (data.schedule), each member's share of the rows:\n" + run.schedule.describe())
  if len(run.length_stages) > 1:
    log("Sequence-length warmup (data.length_schedule): " + "; ".join(
        f"from step {s.step}: {s.rows} rows of {s.length} tokens" for s in run.length_stages))
  writer = metrics.MetricsWriter(workdir, enabled=jax.process_index() == 0)
  writer.truncate_after(start if start else -1)  # Records after the checkpoint, or of an attempt that saved none.
  with run.activated(), signals.StopRequest() as stop, contextlib.ExitStack() as stack:
    eval_sets = evaluation.eval_sets(run)
    if start == 0:
      writer.write(0, evaluation.evaluate_all(run, state.params, eval_sets))
      account.mark("eval")

    # Tokens and model FLOPs of a step at each length stage (data.length_schedule; one stage without it).
    stage_costs = [(s.rows * sum(run.family.row_lengths(s.scaled(run.task_lengths)).values()),
                    s.rows * run.flops_per_example(state.params, s.scaled(run.task_lengths)))
                   for s in run.length_stages]
    peak_dtype = flops.peak_dtype(cfg.model)
    peak = flops.Peak(lambda: flops.matmul_peak(dtype=peak_dtype) * jax.device_count(),
                      key=(str(peak_dtype), jax.device_count()))
    profile_start, profile_stop = tuple(c.profile_steps) or (None, None)
    tracing = False
    step, saved, latest_eval = start, start, {}
    unchecked = None  # (step, its finite flag) of the last step whose flag has not been read
    # Closed on the way out, also by an error: the bar's last redraw would otherwise follow the error's line.
    bar = stack.enter_context(tqdm.tqdm(total=c.steps, initial=start, unit="step", dynamic_ncols=True,
                                        disable=jax.process_index() != 0))
    interval_start, interval_steps, interval_tokens, interval_flops, data_wait = time.perf_counter(), 0, 0, 0.0, 0.0
    stopping = False
    guard = spike_guard.Guard(run, ckpt, start) if c.spike_guard else None
    train_step, settle = (guard.step, guard.settle) if guard else (run.train_step, check_finite)
    rolled_back = {}  # What the first record after a rollback logs.
    minutes_from = time.perf_counter()  # Of the last save, for train.checkpoint_every_minutes.
    account.mark("startup")
    compiled = False
    while step < c.steps and not stopping:
      try:
        waited_from = time.perf_counter()
        try:
          local = next(train_batches)
        except StopIteration:
          raise UserError(f"the training data of {run.task} yields no examples; check the data source") from None
        data_wait += time.perf_counter() - waited_from
        account.mark("data")
        if step == profile_start:
          jax.profiler.start_trace(os.path.join(workdir, "profile"))
          tracing = True
        state, step_metrics = train_step(state, mesh_lib.global_batch(local, run.batch_sharding))
        if tracing and step + 1 == profile_stop:
          tracing = _stop_trace(step_metrics, workdir)
        # The previous step's verdict is read once this one is queued behind it, so the host never idles the device.
        unchecked = settle(unchecked, bar, ckpt, saved)
        account.mark("step" if compiled else "compile")  # The first call compiles the step.
        compiled = True
        step += 1
        unchecked = (step, step_metrics)
        interval_steps += 1
        step_tokens, step_flops = stage_costs[schedule.stage_at(run.length_stages, step - 1)]
        interval_tokens, interval_flops = interval_tokens + step_tokens, interval_flops + step_flops
        bar.update(1)
        eval_now = step % c.eval_every == 0 or step == c.steps
        extra_now = extra_eval is not None and (step % extra_eval.every == 0 or step == c.steps)
        if extra_now and not (eval_now or step % c.log_every == 0):
          writer.write(step, extra_eval(state.params, step))
          account.mark("eval")
        if eval_now or step % c.log_every == 0:
          unchecked = settle(unchecked, bar, ckpt, saved)
          values = train_values(run, jax.device_get(step_metrics), step)
          account.mark("step")
          if guard:
            values.update({"train/spikes": guard.take_spikes(), "train/rollbacks": len(guard.rollbacks),
                           **rolled_back})
            rolled_back = {}
          elapsed = time.perf_counter() - interval_start
          values["train/tokens_per_second"] = interval_tokens / elapsed
          values["train/step_seconds"] = elapsed / interval_steps
          # Share of the time the host waited for its next batch (the steps run meanwhile): 0 when data keeps up.
          values["train/data_wait_fraction"] = data_wait / elapsed
          # Model FLOPs utilisation against the best matmul peak measured (flops.Peak), over all devices.
          values["train/mfu"] = peak.mfu(interval_flops / elapsed)
          if eval_now:
            latest_eval = {"step": step, **evaluation.evaluate_all(run, state.params, eval_sets)}
            values.update({k: v for k, v in latest_eval.items() if k != "step"})
          if extra_now:
            values.update(extra_eval(state.params, step))
          account.mark("eval")
          account.reached(step)
          values["train/goodput"] = account.write()["goodput"]
          writer.write(step, values)
          bar.set_postfix(loss=f"{values['train/loss']:.3f}", tok_s=f"{values['train/tokens_per_second']:,.0f}")
          interval_start, interval_steps, interval_tokens, interval_flops, data_wait = \
              time.perf_counter(), 0, 0, 0.0, 0.0
        stopping = stop.signal is not None  # Read once, here: a stop requested at any time is saved at this step.
        if stopping or step % c.checkpoint_every == 0 or step == c.steps or step in c.keep_steps or (
            step % c.log_every == 0 and _minutes_due(c.checkpoint_every_minutes, minutes_from)):
          unchecked = settle(unchecked, bar, ckpt, saved)
          account.mark("step")
          ckpt.save(step, state, train_batches.position(), guard.saved() if guard else None)
          saved, minutes_from = step, time.perf_counter()
          account.mark("checkpoint")
          account.saved(step)
          account.reached(step)
          account.write()
      except spike_guard.Rollback as back:  # Raised by settle: on from an earlier checkpoint, past the bad batches.
        account.mark("step")
        state, step = guard.roll_back(back, initial_state)
        account.mark("rollback")
        account.rolled_back(step)
        saved, unchecked, stopping = step, None, False
        train_batches.continue_at(step)
        writer.truncate_after(step)
        last = guard.rollbacks[-1]
        rolled_back = {"train/rollback_from_step": back.step, "train/rollback_to_step": step,
                       "train/skipped_batches": last["batches"][1] - last["batches"][0] + 1}
        latest_eval = latest_eval if latest_eval.get("step", 0) <= step else {}
        bar.n = step
        bar.refresh()
        interval_start, interval_steps, interval_tokens, interval_flops, data_wait = \
            time.perf_counter(), 0, 0, 0.0, 0.0
    if tracing:  # Stopped before the end of the profiled range.
      _stop_trace(step_metrics, workdir)
    bar.close()
    ckpt.close()
    account.mark("checkpoint")

    if stopping:
      log(f"Stopped at step {step}; " + (f"the checkpoint of step {saved} is saved. " if saved else "")
          + "Rerun the same command to resume.")
      account.write()
      return {"step": step, "stopped_by": stop.signal}
    final = latest_eval if latest_eval.get("step") == step else evaluation.evaluate_all(run, state.params,
                                                                                         eval_sets)
    final.pop("step", None)
    pairs = sampling.samples(run, state.params)
    summary = report.report(workdir, step, final, pairs, len(eval_sets["eval"]), run.vocabulary.workdir_name)
  account.mark("finish")
  log(goodput.line(account.write()))
  return summary


def _minutes_due(minutes: float, since: float) -> bool:
  """Whether train.checkpoint_every_minutes have passed since `since`, as process 0 sees it (every process
  saves together)."""
  if not minutes:
    return False
  due = time.perf_counter() - since >= minutes * 60
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    due = bool(multihost_utils.broadcast_one_to_all(np.bool_(due)))
  return due


def train_values(run, step_metrics: dict, step: int) -> dict[str, float]:
  """The logged values of a train step's metrics (the step that made `step`): train/NAME, and with a schedule of
  several members (pretrain/data/schedule.py) each member's train/member/MEMBER/loss and accuracy over its rows
  of that step (none where it had none) and its scheduled rate, data/rate/MEMBER."""
  metrics_ = dict(step_metrics)
  for key in ("finite", *spike_guard.VERDICT):
    metrics_.pop(key, None)
  weights = metrics_.pop("member_weight", None)
  values = {}
  for key, value in metrics_.items():
    if key.startswith("member_"):
      values.update({f"train/member/{name}/{key.removeprefix('member_')}": float(v)
                     for name, v, w in zip(run.schedule.names, value, weights) if w > 0})
    else:
      values[f"train/{key}"] = float(value)
  if len(run.schedule.members) > 1:
    values.update({f"data/rate/{name}": float(rate)
                   for name, rate in zip(run.schedule.names, run.schedule.rates_at(step - 1))})
  return values


def check_finite(unchecked, bar, ckpt, saved: int) -> None:
  """Waits for the step `unchecked` names, (step, its metrics), if any: a step whose loss or gradient
  was not finite was not applied (train/steps.py), so the run stops there.
  Returns None: nothing is left unchecked."""
  if unchecked is None or bool(unchecked[1]["finite"]):
    return None
  bar.close()
  ckpt.close()  # Waits for a pending save of a good state.
  kept = f"the checkpoint of step {saved} is intact" if saved else "no checkpoint had been written"
  raise UserError(f"the loss or gradient became NaN or Inf at step {unchecked[0]}; stopped without saving ({kept})",
                  fix="lower optimizer.learning_rate or raise optimizer.warmup_steps, then rerun to resume")


def _stop_trace(last_outputs, workdir: str) -> bool:
  jax.block_until_ready(last_outputs)
  jax.profiler.stop_trace()
  log(f"Wrote a profiler trace to {workdir}/profile (open it with TensorBoard's profile plugin or xprof)")
  return False
