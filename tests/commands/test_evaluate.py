"""pretrain eval on a trained run."""

import json
import math

import jax
import numpy as np
import pytest

from pretrain import run as run_lib
from pretrain.parallel import mesh as mesh_lib
from pretrain.system.errors import UserError
from pretrain.train import metrics
from pretrain.vocab import pipeline as vocab
from tests.conftest import tiny_config


@pytest.mark.slow
def test_evaluate_matches_the_training_evaluation_and_names_bad_tasks(trained_run, run_pretrain):
  workdir = trained_run
  evaluate = lambda *args: run_pretrain("eval", f"--workdir={workdir}", *args)
  result = evaluate("--task=corpus_clm", "--batches=3")
  assert result.returncode == 0, result.stderr
  saved = json.load(open(workdir / "eval" / "corpus_clm-validation-batches3-step3.json"))  # Part of the split.
  logged = [r for r in metrics.read(str(workdir)) if r["step"] == 3 and "eval/loss" in r][0]
  assert abs(saved["loss"] - logged["eval/loss"]) < 1e-5 and saved["batches"] == 3
  assert f"perplexity {saved['perplexity']:.2f}" in result.stdout
  assert f"bits_per_byte {saved['bits_per_byte']:.4f}" in result.stdout
  assert abs(saved["bits_per_byte"] - logged["eval/bits_per_byte"]) < 1e-5
  other = evaluate("--task=corpus_fim", "--batches=2")
  assert other.returncode == 0, other.stderr
  longer = evaluate("--task=corpus_prefix_lm_decoder")  # Rows of 128 + 128 for a model trained on rows of 32.
  assert longer.returncode == 2 and "whose rows of 256 tokens (data.inputs_length + data.targets_length) are " \
      "longer than the 32 positions the run's model trains at" in longer.stderr
  bad = evaluate("--task=corpus_span_corruption")
  assert bad.returncode == 2 and "not a task this llama run can be evaluated on" in bad.stderr
  assert "corpus_clm" in bad.stderr


def test_bits_per_byte_is_the_loss_in_bits_over_the_bytes_of_the_text(vocabulary):
  """On one short document, by hand: the loss summed in nats over its tokens (EOS included), over ln 2, over
  its UTF-8 bytes (plus the one of the space SentencePiece puts before its first word)."""
  text = "Return the number of items. Ünïcödé, tabs\tand 42 digits too!"
  tokens = vocabulary.encode(text) + [vocab.EOS_ID]
  assert vocab.bytes_per_id(vocabulary)[tokens].sum() == len(text.encode("utf-8")) + 1
  run = run_lib.Run.build(tiny_config(), vocabulary=vocabulary)
  length, rows = run.task_lengths["targets"], run.cfg.train.batch_size
  row = lambda values: np.array([values + [0] * (length - len(values))] + [[0] * length] * (rows - 1), np.int32)
  local = {"decoder_target_tokens": row(tokens), "decoder_input_tokens": row([0] + tokens[:-1]),
           "decoder_loss_weights": row([1] * len(tokens)), "decoder_segment_ids": row([1] * len(tokens)),
           "decoder_positions": row(list(range(len(tokens))))}
  params = run.create_state().params
  with run.activated():
    totals = jax.device_get(run.eval_step(params, mesh_lib.global_batch(local, run.batch_sharding)))
    logits = np.asarray(run.family.forward(run.model, params, local)[0], np.float64)[0, :len(tokens)]
  nats = -sum(row_logits[t] - np.log(np.exp(row_logits - row_logits.max()).sum()) - row_logits.max()
              for row_logits, t in zip(logits, tokens))
  expected = nats / math.log(2) / (len(text.encode("utf-8")) + 1)
  assert abs(run.family.eval_metrics({k: float(v) for k, v in totals.items()})["bits_per_byte"] - expected) < 1e-4


def test_sliding_windows_score_every_token_once_and_the_stride_changes_only_the_context():
  from pretrain.downstream import sliding  # pylint: disable=g-import-not-at-top
  from lm_eval import utils as lm_utils  # pylint: disable=g-import-not-at-top
  text = np.arange(1, 101, dtype=np.int32)
  for window, stride in ((16, 16), (16, 4), (16, 1), (7, 3), (200, 50)):
    spans = sliding.windows(len(text), window, stride)
    scored = np.concatenate([np.arange(s, e) for _, s, e in spans])
    np.testing.assert_array_equal(scored, np.arange(len(text)))  # Every token once, in order.
    assert all(e - a <= window and (s - a >= window - stride or a == 0) for a, s, e in spans[1:])
    rows = sliding.rows(text, window, stride, width=window)
    targets = rows["decoder_target_tokens"][rows["decoder_loss_weights"] == 1]
    np.testing.assert_array_equal(targets, text)  # The same tokens scored, whatever the stride.
    assert (rows["decoder_input_tokens"][:, 0] == 0).all()  # Each window starts as a training row starts.
    np.testing.assert_array_equal(rows["decoder_input_tokens"][:, 1:][rows["decoder_segment_ids"][:, 1:] == 1],
                                  rows["decoder_target_tokens"][:, :-1][rows["decoder_segment_ids"][:, 1:] == 1])
    # lm-eval's rolling windows with context_len = window - stride + 1 score the same tokens per window.
    theirs = [len(t) for t in map(lambda p: p[1], lm_utils.get_rolling_token_windows(
        token_list=text.tolist(), prefix_token=0, max_seq_len=window, context_len=window - stride + 1))]
    assert theirs == [e - s for _, s, e in spans]
  with pytest.raises(UserError, match="give a stride from 1 to the window"):
    sliding.windows(10, 4, 5)


@pytest.mark.slow
def test_sliding_windows_of_the_row_length_are_the_stream_context_rows(trained_run, run_pretrain):
  """pretrain eval --window=W --stride=W over the split's text reads the rows data.context=stream makes of it,
  so both give one loss; a shorter stride scores the same tokens with more context."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  from pretrain import objectives  # pylint: disable=g-import-not-at-top
  from pretrain.data import sources, tasks  # pylint: disable=g-import-not-at-top
  from pretrain.train import evaluation  # pylint: disable=g-import-not-at-top
  result = run_pretrain("eval", f"--workdir={trained_run}", "--task=corpus_clm", "--window=32")
  assert result.returncode == 0, result.stderr
  disjoint = json.load(open(trained_run / "eval" / "corpus_clm-validation-window32-stride32-step3.json"))
  assert "windows of 32 tokens scoring 32" in result.stdout
  run, params, _ = run_lib.load(str(trained_run))
  stream = objectives.make("clm", ml_collections.ConfigDict({"context": "stream"}), seed=0)
  name = tasks.register(sources.mixture_sources(run.cfg.data)[0][0], run.vocabulary, stream)
  with run.activated():
    totals = evaluation.sums(run.eval_step, params, evaluation.global_batches(run, name, stream, "validation", None))
  assert abs(run.family.eval_metrics(totals)["loss"] - disjoint["loss"]) < 1e-5
  overlapping = run_pretrain("eval", f"--workdir={trained_run}", "--task=corpus_clm", "--window=32", "--stride=8")
  assert overlapping.returncode == 0, overlapping.stderr
  assert "windows of 32 tokens scoring 8" in overlapping.stdout
  refused = run_pretrain("eval", f"--workdir={trained_run}", "--task=corpus_fim", "--window=32")
  assert refused.returncode == 2 and "--window reads the split as one text, for a causal LM" in refused.stderr
  assert "use corpus_clm, or drop --window" in refused.stderr  # The run's own causal task, by its name.
  longer = run_pretrain("eval", f"--workdir={trained_run}", "--task=corpus_clm", "--window=64")
  assert longer.returncode == 2 and "--window=64 is longer than the run's rows of 32 tokens" in longer.stderr
