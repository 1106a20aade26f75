"""pretrain eval on a trained run."""

import json
import math

import jax
import numpy as np

from pretrain import run as run_lib
from pretrain.parallel import mesh as mesh_lib
from pretrain.train import metrics
from pretrain.vocab import pipeline as vocab
from tests.conftest import tiny_config


def test_evaluate_matches_the_training_evaluation_and_names_bad_tasks(trained_run, run_pretrain):
  workdir = trained_run
  evaluate = lambda *args: run_pretrain("eval", f"--workdir={workdir}", *args)
  result = evaluate("--task=corpus_clm", "--batches=3")
  assert result.returncode == 0, result.stderr
  saved = json.load(open(workdir / "eval" / "corpus_clm-validation-step3.json"))
  logged = [r for r in metrics.read(str(workdir)) if r["step"] == 3 and "eval/loss" in r][0]
  assert abs(saved["loss"] - logged["eval/loss"]) < 1e-5 and saved["batches"] == 3
  assert f"perplexity {saved['perplexity']:.2f}" in result.stdout
  assert f"bits_per_byte {saved['bits_per_byte']:.4f}" in result.stdout
  assert abs(saved["bits_per_byte"] - logged["eval/bits_per_byte"]) < 1e-5
  other = evaluate("--task=corpus_prefix_lm_decoder", "--batches=2")
  assert other.returncode == 0, other.stderr
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
