"""The training loop: train a built run (pretrain.run) to train.steps, evaluating, logging and checkpointing.

Resumes from the workdir's latest checkpoint; SIGTERM or Ctrl-C saves a
checkpoint at the current step and stops.
"""

import contextlib
import os
import sys
import time

import jax
from jax.experimental import multihost_utils
import numpy as np
import tqdm

from pretrain.data import schedule
from pretrain.parallel import mesh as mesh_lib
from pretrain.system import console
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
  c = run.cfg.train
  _announce(run, workdir, start)
  writer = metrics.MetricsWriter(workdir, enabled=jax.process_index() == 0, another_run=account.checkpoints_gone)
  writer.truncate_after(start if start else -1)  # Records after the checkpoint, or of an attempt that saved none.
  with run.activated(), contextlib.ExitStack() as stack:
    stop = stack.enter_context(signals.StopRequest())
    # Every write of the loop (messages, bars, an evaluation's output) goes quiet when its reader goes away, rather
    # than failing a step, and asks for a save and a stop (pretrain/system/console.py).
    stack.enter_context(contextlib.redirect_stdout(console.Output(sys.stdout, stop.reader_gone)))
    stack.enter_context(contextlib.redirect_stderr(console.Output(sys.stderr, stop.reader_gone)))
    eval_sets = evaluation.eval_sets(run)
    if start == 0:  # The initial parameters' figures: each curve's baseline. A task the run cannot score (lm-eval's
      # text longer than its rows: likelihood.TooLong) is refused here, before any step.
      initial = evaluation.evaluate_all(run, state.params, eval_sets)
      writer.write(0, {**initial, **(extra_eval(state.params, 0) if extra_eval is not None else {})})
      account.mark("eval")
    # Closed on the way out, also by an error: the bar's last redraw would otherwise follow the error's line.
    bar = stack.enter_context(tqdm.tqdm(total=c.steps, initial=start, unit="step", dynamic_ncols=True,
                                        disable=jax.process_index() != 0))
    loop = _Loop(run, workdir, ckpt, state, start, train_batches, account, writer, bar, eval_sets, extra_eval)
    stopped_by = None
    account.mark("startup")
    while loop.step < c.steps and not loop.stopping:
      try:
        loop.train_step()
        eval_now = loop.step % c.eval_every == 0 or loop.step == c.steps
        extra_now = extra_eval is not None and (loop.step % extra_eval.every == 0 or loop.step == c.steps)
        if eval_now or loop.step % c.log_every == 0:
          loop.log(eval_now, extra_now)
        elif extra_now:
          writer.write(loop.step, extra_eval(loop.state.params, loop.step))
          account.mark("eval")
        stopped_by = stop.agreed(loop.step, c.log_every)  # Read once, here: a stop requested is saved now.
        loop.stopping = stopped_by is not None
        if loop.checkpoint_due():
          loop.save()
      except spike_guard.Rollback as back:  # Raised by settle: on from an earlier checkpoint, past the bad batches.
        loop.roll_back(back, initial_state)
    loop.profiler.close(loop.step_metrics)  # Stopped before the end of the profiled range.
    bar.close()
    ckpt.close()
    account.mark("checkpoint")
    if loop.stopping:
      log(f"Stopped at step {loop.step}; " + (f"the checkpoint of step {loop.saved} is saved. " if loop.saved else "")
          + "Rerun the same command to resume.")
      account.write()
      return {"step": loop.step, "stopped_by": stopped_by}
    summary = loop.finish()
  account.mark("finish")
  account.finished()
  log(goodput.line(account.write()))
  return summary


def _announce(run, workdir: str, start: int) -> None:
  """The lines a run starts with: where it resumes, a short warmup, the pipeline, the data and length schedules."""
  if start:
    log(f"Resuming from the checkpoint at step {start} in {workdir}/checkpoints")
  short = optimizer.warmup_note(run.cfg.optimizer, run.cfg.train.steps)
  if short:
    log(short)
  for note in (schedule.unreached(run.schedule, run.length_stages, run.cfg.train.steps),
               None if run.cfg.data.task else run.family.length_note(run.cfg.data)):
    if note:
      log(note)
  if run.pipeline:
    log(run.pipeline.describe())
  if len(run.schedule.members) > 1:
    log("The data schedule (data.schedule), each member's share of the rows:\n" + run.schedule.describe())
  if len(run.length_stages) > 1:
    log("Sequence-length warmup (data.length_schedule): " + "; ".join(
        f"from step {s.step}: {s.rows} rows of {s.length} tokens" for s in run.length_stages))


class _Interval:
  """The steps, tokens, model FLOPs and waits for data since the last logged record, and their rates."""

  def __init__(self, run, params):
    # Tokens and model FLOPs of a step at each length stage (data.length_schedule; one stage without it).
    self.stage_costs = [(s.rows * sum(run.family.row_lengths(s.scaled(run.task_lengths)).values()),
                         s.rows * run.flops_per_example(params, s.scaled(run.task_lengths)))
                        for s in run.length_stages]
    self.length_stages = run.length_stages
    peak_dtype = flops.peak_dtype(run.cfg.model)
    self.peak = flops.Peak(lambda: flops.matmul_peak(dtype=peak_dtype) * jax.device_count(),
                           key=(str(peak_dtype), jax.device_count()))
    self.restart()

  def restart(self) -> None:
    self.start, self.steps, self.tokens, self.flops, self.data_wait = time.perf_counter(), 0, 0, 0.0, 0.0

  def add_step(self, step: int) -> None:
    """Counts the step that made `step`."""
    tokens, step_flops = self.stage_costs[schedule.stage_at(self.length_stages, step - 1)]
    self.steps, self.tokens, self.flops = self.steps + 1, self.tokens + tokens, self.flops + step_flops

  def rates(self) -> dict[str, float]:
    elapsed = time.perf_counter() - self.start
    return {"train/tokens_per_second": self.tokens / elapsed, "train/step_seconds": elapsed / self.steps,
            # Share of the time the host waited for its next batch (the steps run meanwhile): 0 when data keeps up.
            "train/data_wait_fraction": self.data_wait / elapsed,
            # Model FLOPs utilisation against the best matmul peak measured (flops.Peak), over all devices.
            "train/mfu": self.peak.mfu(self.flops / elapsed)}


class _Profiler:
  """train.profile_steps: a trace of steps [start, stop) into WORKDIR/profile."""

  def __init__(self, steps, workdir: str):
    self.start, self.stop = tuple(steps) or (None, None)
    self.workdir, self.tracing = workdir, False

  def before(self, step: int) -> None:
    if step == self.start:
      jax.profiler.start_trace(os.path.join(self.workdir, "profile"))
      self.tracing = True

  def after(self, step: int, outputs) -> None:
    if self.tracing and step + 1 == self.stop:
      self.close(outputs)

  def close(self, outputs) -> None:
    if self.tracing:
      jax.block_until_ready(outputs)
      jax.profiler.stop_trace()
      log(f"Wrote a profiler trace to {self.workdir}/profile (open it with TensorBoard's profile plugin or xprof)")
      self.tracing = False


class _Loop:
  """What the loop carries from step to step, and its phases: a train step, a logged record (with evaluation), a
  checkpoint, a rollback and the end of the run."""

  def __init__(self, run, workdir, ckpt, state, start, train_batches, account, writer, bar, eval_sets, extra_eval):
    self.run, self.c, self.workdir, self.ckpt, self.state = run, run.cfg.train, workdir, ckpt, state
    self.train_batches = train_batches
    self.account, self.writer, self.bar, self.eval_sets, self.extra_eval = account, writer, bar, eval_sets, extra_eval
    self.step, self.saved, self.latest_eval, self.stopping, self.compiled = start, start, {}, False, False
    self.unchecked = None  # (step, its metrics) of the last step whose finite flag has not been read
    self.step_metrics = None  # The last train step's
    self.interval = _Interval(run, state.params)
    self.profiler = _Profiler(self.c.profile_steps, workdir)
    self.guard = spike_guard.Guard(run, ckpt, start) if self.c.spike_guard else None
    self._step, self._settle = (self.guard.step, self.guard.settle) if self.guard else (run.train_step, check_finite)
    self.rolled_back = {}  # What the first record after a rollback logs.
    self.minutes_from = time.perf_counter()  # Of the last save, for train.checkpoint_every_minutes.

  def settle(self) -> None:
    self.unchecked = self._settle(self.unchecked, self.bar, self.ckpt, self.saved)

  def train_step(self) -> None:
    waited_from = time.perf_counter()
    try:
      local = next(self.train_batches)
    except StopIteration:
      raise UserError(f"the training data of {self.run.task} yields no examples; check the data source") from None
    self.interval.data_wait += time.perf_counter() - waited_from
    self.account.mark("data")
    self.profiler.before(self.step)
    self.state, self.step_metrics = self._step(self.state, mesh_lib.global_batch(local, self.run.batch_sharding))
    self.profiler.after(self.step, self.step_metrics)
    # The previous step's verdict is read once this one is queued behind it, so the host never idles the device.
    self.settle()
    self.account.mark("step" if self.compiled else "compile")  # The first call compiles the step.
    if not self.compiled:  # The logged rates start after compiling (and the first batch's wait), as steps run.
      self.interval.restart()
    self.compiled = True
    self.step += 1
    self.unchecked = (self.step, self.step_metrics)
    self.interval.add_step(self.step)
    self.bar.update(1)

  def log(self, eval_now: bool, extra_now: bool) -> None:
    """A record of the train step's values, its interval's rates and goodput, and the evaluations due."""
    self.settle()
    values = train_values(self.run, jax.device_get(self.step_metrics), self.step)
    self.account.mark("step")
    if self.guard:
      values.update({"train/spikes": self.guard.take_spikes(), "train/rollbacks": len(self.guard.rollbacks),
                     **self.rolled_back})
      self.rolled_back = {}
    values.update(self.interval.rates())
    if eval_now:
      self.latest_eval = {"step": self.step, **evaluation.evaluate_all(self.run, self.state.params, self.eval_sets)}
      values.update({k: v for k, v in self.latest_eval.items() if k != "step"})
    if extra_now:
      values.update(self.extra_eval(self.state.params, self.step))
    self.account.mark("eval")
    self.account.reached(self.step)
    values["train/goodput"] = self.account.write()["goodput"]
    self.writer.write(self.step, values)
    self.bar.set_postfix(loss=f"{values['train/loss']:.3f}", tok_s=f"{values['train/tokens_per_second']:,.0f}")
    self.interval.restart()

  def checkpoint_due(self) -> bool:
    c, step = self.c, self.step
    return self.stopping or step % c.checkpoint_every == 0 or step == c.steps or step in c.keep_steps or (
        step % c.log_every == 0 and _minutes_due(c.checkpoint_every_minutes, self.minutes_from))

  def save(self) -> None:
    self.settle()
    self.account.mark("step")
    self.ckpt.save(self.step, self.state, self.train_batches.position(), self.guard.saved() if self.guard else None)
    self.saved, self.minutes_from = self.step, time.perf_counter()
    self.account.mark("checkpoint")
    self.account.saved(self.step)
    self.account.reached(self.step)
    self.account.write()

  def roll_back(self, back, initial_state) -> None:
    """On from an earlier checkpoint (or the initial state), past the batches that spiked."""
    self.account.mark("step")
    self.state, self.step = self.guard.roll_back(back, initial_state)
    self.account.mark("rollback")
    self.account.rolled_back(self.step)
    self.saved, self.unchecked, self.stopping = self.step, None, False
    self.train_batches.continue_at(self.step)
    self.writer.truncate_after(self.step)
    last = self.guard.rollbacks[-1]
    self.rolled_back = {"train/rollback_from_step": back.step, "train/rollback_to_step": self.step,
                        "train/skipped_batches": last["batches"][1] - last["batches"][0] + 1}
    self.latest_eval = self.latest_eval if self.latest_eval.get("step", 0) <= self.step else {}
    self.bar.n = self.step
    self.bar.refresh()
    self.interval.restart()

  def finish(self) -> dict:
    """The run's summary: its last evaluation (made now where the last step logged none), samples and report."""
    final = self.latest_eval if self.latest_eval.get("step") == self.step else evaluation.evaluate_all(
        self.run, self.state.params, self.eval_sets)
    final.pop("step", None)
    pairs = sampling.samples(self.run, self.state.params)
    return report.report(self.workdir, self.step, final, pairs, len(self.eval_sets["eval"]),
                         self.run.vocabulary.workdir_name)


def _minutes_due(minutes: float, since: float) -> bool:
  """Whether train.checkpoint_every_minutes have passed since `since`, as process 0 sees it (every process
  saves together)."""
  if not minutes:
    return False
  due = time.perf_counter() - since >= minutes * 60
  if jax.process_count() > 1:
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
                  fix="lower optimizer.learning_rate or raise optimizer.warmup_steps, then rerun to resume",
                  every_process=True)  # The loss is the global batch's.
