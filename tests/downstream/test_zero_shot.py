"""Scoring text by likelihood (pretrain/downstream/likelihood.py) against token-by-token computations for every
family, and the zero-shot tasks (pretrain/downstream/zero_shot.py): their files are deterministic and drawn only
from held-out documents, and random parameters score chance."""

import hashlib

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from pretrain import families, run as run_lib
from pretrain.data import corpus
from pretrain.downstream import likelihood, stats, zero_shot
from tests import numerics
from tests.conftest import tiny_config

# Requests of several lengths (so that rows pad to different buckets and share batches), one with no context.
TEXTS = [("The value of the", " object is returned."), ("", "Return a list of strings."),
         ("A method " * 6, " name"), ("x", " y")]


def _run(vocabulary, objective: str, *args: str):
  cfg = tiny_config(f"--config.data.objective={objective}", "--config.data.inputs_length=48",
                    "--config.data.targets_length=24", "--config.data.seq_len=48", *args)
  return run_lib.Run.build(cfg, vocabulary=vocabulary)


def _requests(vocabulary):
  return [(vocabulary.encode(c) if c else [], vocabulary.encode(c + t)[len(vocabulary.encode(c)) if c else 0:])
          for c, t in TEXTS]


def _by_hand(run, params, context, continuation):
  """log P(continuation | context), a forward pass per scored token on the unpadded row."""
  apply = lambda *args, **kwargs: run.model.apply({"params": params}, *args, **kwargs)
  total = 0.0
  for j, token in enumerate(continuation):
    name = run.objective.name
    if name in ("clm", "prefix_lm_decoder"):
      row = jnp.asarray([[0, *context, *continuation[:j]]])
      prefix = (jnp.arange(row.shape[1]) <= len(context))[None] if name == "prefix_lm_decoder" else None
      logits = apply(row, jnp.ones_like(row), jnp.arange(row.shape[1])[None], prefix)[0, -1]
    elif name == "span_corruption":
      sentinel = run.vocab_size - 1
      encoder = jnp.asarray([[*context, sentinel, 1]])
      logits = apply(encoder, jnp.asarray([[0, sentinel, *continuation[:j]]]))[0, -1]
    else:  # mlm: the token masked, everything else seen.
      tokens = np.asarray([*context, *continuation])
      tokens[len(context) + j] = run.vocabulary.encode("[MASK]")[-1]
      logits = apply(jnp.asarray(tokens[None]))[0, len(context) + j]
    total += float(jax.nn.log_softmax(logits)[token])
  return total


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["clm", "prefix_lm_decoder", "span_corruption", "mlm"])
def test_likelihood_scoring_equals_a_forward_pass_per_token(vocabulary, objective):
  run = _run(vocabulary, objective)
  params = run.create_state().params
  requests = _requests(vocabulary)
  scored = likelihood.Scorer(run, batch=4)(params, requests)
  terms = numerics.transformer_terms(run.model.config, 48) + run.vocab_size  # The model, then a log-softmax.
  for (context, continuation), (logprob, greedy) in zip(requests, scored):
    numerics.assert_close(logprob, _by_hand(run, params, context, continuation), terms=terms)
    assert greedy in (True, False)


def test_electra_scores_by_its_discriminator(vocabulary):
  run = _run(vocabulary, "electra")
  params = run.create_state().params
  requests = _requests(vocabulary)
  terms = numerics.transformer_terms(run.model.config, 48)
  for (context, continuation), (logprob, _) in zip(requests, likelihood.Scorer(run)(params, requests)):
    tokens = jnp.asarray([[*context, *continuation]])
    logits, _ = run.model.apply({"params": params}, tokens, jnp.ones_like(tokens),
                                jnp.arange(tokens.shape[1])[None], method="discriminate")
    numerics.assert_close(logprob, float(jax.nn.log_sigmoid(-logits[0, len(context):]).sum()), terms=terms)


def test_a_model_with_no_token_head_is_refused(vocabulary):
  run = _run(vocabulary, "contrastive", "--config.model.dropout=0.1")
  with pytest.raises(Exception, match="no token predictions to score text by"):
    likelihood.Scorer(run)(None, _requests(vocabulary))


def test_the_shipped_task_files_are_what_the_builder_makes_from_held_out_documents():
  built = zero_shot.files(zero_shot.from_corpus())
  for name, content in built.items():
    with open(f"{zero_shot.directory()}/{name}", "rb") as f:
      assert f.read() == content, f"{name} differs: python tools/zero_shot_tasks.py rebuilds it (new VERSION)"
  held_out = {zero_shot.document_id(t): t for t in corpus.documents() if corpus.split_of(t) == "downstream"}
  train = "\0".join(t for t in corpus.documents() if corpus.split_of(t) == "train")
  for name in zero_shot.TASKS:
    items = zero_shot.load(name)
    assert len(items) >= 120 and len({item["id"] for item in items}) == len(items)
    for item in items:
      text = held_out[item["document"]]  # No task draws on trained-on text, not even a line of it.
      assert zero_shot.correct_text(name, item) in text and zero_shot.correct_text(name, item) not in train
      if name == "cloze":
        assert f"{item['context']} {item['choices'][item['answer']]}." in text
        assert all(f" {c}" in f" {text}" or c in text for c in item["choices"])
      else:
        assert item["good"] in text and item["good"] != item["bad"]
        assert sorted(item["good"].split()) == sorted(item["bad"].split()) or name == "pairs_replace"
  assert hashlib.sha256(built["manifest.json"]).hexdigest()  # Written with the files.


def test_the_leak_measure_finds_the_old_split_s_overlap_and_none_in_the_new():
  documents = corpus.documents()
  by_split = lambda split: {name: [t for t, s in zip(documents, split) if s == name] for name in corpus.SPLITS}
  new = zero_shot.leak(zero_shot.directory(), by_split(corpus.assign(documents)))
  assert new["downstream_shingles_in_train"] < 0.01
  assert new["validation"]["half_in_train"] == new["downstream"]["half_in_train"] == 0
  assert all(counts["verbatim_in_train"] == 0 and counts["items"] for counts in new["tasks"].values())
  old = zero_shot.leak(zero_shot.directory(), by_split(corpus.assign(documents, clustered=False)))  # Corpus 1.1.0.
  assert old["downstream_shingles_in_train"] > 0.2 and old["downstream"]["80%_in_train"] > 10


@pytest.mark.slow
def test_random_parameters_score_chance(vocabulary):
  """Over initial parameters of five seeds, each task's accuracy has chance inside its 95% interval."""
  run = _run(vocabulary, "clm", "--config.data.seq_len=112")  # Rows that hold the longest text (104 tokens).
  found = {name: [] for name in zero_shot.TASKS}
  scorer = likelihood.Scorer(run)  # Compiled once for the five.
  for seed in range(5):
    run.cfg.train.seed = seed
    scores, not_scored = zero_shot.evaluate(run, run.create_state().params, scorer=scorer)
    assert not not_scored
    for name, accuracy in scores.items():
      found[name].append(accuracy)
  for name, values in found.items():
    mean, half = stats.interval(values)
    assert abs(mean - zero_shot.CHANCE[name]) <= half, (name, values)


def test_a_pair_is_cut_where_its_texts_differ_at_whole_words():
  swap = {"good": "The cat sat on the mat.", "bad": "The sat cat on the mat."}
  replace = {"good": "a red box\nof tools", "bad": "a big box\nof tools"}
  assert zero_shot.spans(swap) == [("The", "cat sat", "on the mat."), ("The", "sat cat", "on the mat.")]
  assert zero_shot.spans(replace) == [("a", "red", "box\nof tools"), ("a", "big", "box\nof tools")]
  start = {"good": "cats sleep", "bad": "dogs sleep"}  # A difference at the first or last character.
  assert zero_shot.spans(start) == [("", "cats", "sleep"), ("", "dogs", "sleep")]


@pytest.mark.slow
def test_span_corruption_also_scores_a_pair_as_its_masked_span(vocabulary):
  """A span corruption model scores each text's differing part as T5 fills a span: the encoder reads the text
  with the part replaced by <extra_id_0>, the decoder writes <extra_id_0> and the part, which alone is scored;
  a decoder-only model has no such form."""
  run = _run(vocabulary, "span_corruption")
  params = run.create_state().params
  prefix, middle, suffix = (vocabulary.encode(t) for t in ("The cat", "sat on", "the mat."))
  (row,) = run.objective.span_rows(prefix, middle, suffix, vocabulary, run.task_lengths)
  sentinel = vocabulary.vocab_size - 1
  assert row["encoder_input_tokens"].tolist() == [*prefix, sentinel, *suffix, 1]
  assert row["decoder_target_tokens"].tolist() == [sentinel, *middle]
  assert row["decoder_loss_weights"].tolist() == [0] + [1] * len(middle)
  scorer = likelihood.Scorer(run, rows=lambda *parts: run.objective.span_rows(*parts, vocabulary, run.task_lengths))
  (logprob, _), = scorer(params, [(prefix, middle, suffix)])
  apply = lambda decoder: run.model.apply({"params": params}, jnp.asarray([row["encoder_input_tokens"]]),
                                          jnp.asarray([decoder]))
  by_hand = sum(float(jax.nn.log_softmax(apply([0, sentinel, *middle[:j]])[0, -1])[token])
                for j, token in enumerate(middle))
  assert logprob == pytest.approx(by_hand, abs=1e-4)
  found, _ = zero_shot.evaluate(run, params, names=("pairs_swap",), limit=10)
  assert set(found) == {"pairs_swap", "pairs_swap_span"} and 0 <= found["pairs_swap_span"] <= 1
  clm = _run(vocabulary, "clm")
  assert set(zero_shot.evaluate(clm, clm.create_state().params, names=("pairs_swap",), limit=10)[0]) == {"pairs_swap"}
  # The two lines of pairs_lines (43 to 104 tokens) are longer than this model's 48 encoder and 24 decoder
  # positions, in either form: not scored, and said why, where the first 10 pairs of swapped words fit.
  found, not_scored = zero_shot.evaluate(run, params, names=("pairs_swap", "pairs_lines"), limit=10)
  assert set(found) == {"pairs_swap", "pairs_swap_span"}
  assert set(not_scored) == {"pairs_lines", "pairs_lines_span"}
  assert "20 of 20 requests give the model's decoder up to" in not_scored["pairs_lines"]
  assert "more than the 24 positions it trained at" in not_scored["pairs_lines"]
  assert "positions it trained at" in not_scored["pairs_lines_span"]


def test_a_model_scores_texts_within_the_positions_it_trained_at():
  """Rotary positions past a row's length, and T5's relative offsets short of its farthest bucket, are positions
  the model never trained at; offsets from that bucket on share it, so a side that reached it reads any length
  (T5's 114 targets do: lm-eval's hf backend reads T5 at 2048)."""
  t5 = ml_collections.ConfigDict({"relative_attention_num_buckets": 32, "relative_attention_max_distance": 128})
  assert families.ENCODER_DECODER.position_limits(t5, {"inputs": 512, "targets": 114}) == {"encoder": None,
                                                                                             "decoder": None}
  assert families.ENCODER_DECODER.position_limits(t5, {"inputs": 104, "targets": 24}) == {"encoder": None,
                                                                                            "decoder": 24}
  assert families.ENCODER_DECODER.position_limits(t5, {"inputs": 64, "targets": 113}) == {"encoder": 64,
                                                                                            "decoder": 113}
  assert families.CAUSAL_LM.position_limits(None, {"targets": 128}) == {"decoder": 128}
  assert families.PREFIX_LM.position_limits(None, {"inputs": 64, "targets": 64}) == {"decoder": 128}
  assert families.ENCODER_ONLY.position_limits(None, {"inputs": 64, "targets": 64, "weights": 64}) == {
      "encoder": 64}
  rows = [(0, {"decoder_input_tokens": np.zeros(24)}), (1, {"decoder_input_tokens": np.zeros(25)})]
  likelihood.check_lengths(rows[:1], {"decoder": 24}, 1)
  likelihood.check_lengths(rows, {"decoder": None}, 2)
  with pytest.raises(likelihood.TooLong, match="1 of 2 requests give the model's decoder up to 25 tokens, more "
                                               "than the 24 positions it trained at"):
    likelihood.check_lengths(rows, {"decoder": 24}, 2)
