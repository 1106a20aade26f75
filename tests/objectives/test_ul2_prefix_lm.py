"""UL2 mixture of denoisers and prefix LM, on the bundled corpus."""

import collections
import io
import itertools
import json
import os

import numpy as np
import pytest
import sentencepiece as spm

from pretrain import configs, families as family, objectives
from pretrain.data import replay, tasks
from pretrain.objectives import ul2
from pretrain.system.errors import UserError
from pretrain.vocab import pipeline as vocab
from tests.conftest import task_examples


def _data_cfg(**overrides):
  cfg = configs.load("quickstart").data
  cfg.update(overrides)
  return cfg


_examples = task_examples


def test_ul2_rates_and_mode_tokens(corpus_source, vocabulary):
  denoisers = (("R", 3, 0.15, 0.5), ("X", 8, 0.5, 0.3), ("S", 0, 0, 0.2))
  examples = _examples(corpus_source, vocabulary, "ul2", {"inputs": 48, "targets": 48}, split="train", num=1500,
                       ul2_denoisers=denoisers)
  modes = {vocab.single_piece_id(vocabulary, t): k for k, t in ul2.MODE_TOKENS.items()}
  counts = collections.Counter(modes[int(ex["inputs"][0])] for ex in examples)
  for kind, rate in (("R", 0.5), ("X", 0.3), ("S", 0.2)):
    tolerance = 4 * np.sqrt(rate * (1 - rate) / len(examples))
    assert abs(counts[kind] / len(examples) - rate) < tolerance, counts
  first_sentinel = vocab.sentinel_id(vocabulary, 0)
  for ex in examples:
    kind = modes[int(ex["inputs"][0])]
    assert len(ex["inputs"]) <= 48 and len(ex["targets"]) <= 48
    assert ex["inputs"][-1] == vocab.EOS_ID and ex["targets"][-1] == vocab.EOS_ID
    has_sentinel = (ex["targets"] > first_sentinel - vocabulary.extra_ids).any()
    assert has_sentinel == (kind != "S")


@pytest.mark.slow
def test_ul2_decoder_form_is_a_prefix_lm_example(corpus_source, vocabulary):
  examples = _examples(corpus_source, vocabulary, "ul2_decoder", {"inputs": 64, "targets": 64}, num=50)
  for ex in examples:
    assert vocab.EOS_ID not in ex["inputs"] and ex["targets"][-1] == vocab.EOS_ID
  name = tasks.task_name(corpus_source, objectives.make("ul2_decoder", _data_cfg(), 0))
  batch = next(replay.batches(name, "validation", {"inputs": 64, "targets": 64}, 4, family.PREFIX_LM, shuffle=False,
                                seed=0, repeat=False))
  assert batch["decoder_target_tokens"].shape == (4, 128)
  dca, weights, segments = (batch[k] for k in ("decoder_causal_attention", "decoder_loss_weights",
                                                "decoder_segment_ids"))
  # The prefix (inputs + 1) attends bidirectionally; the loss is on the targets only, so each packed
  # example has exactly one position in both: its first target.
  assert (weights[(segments > 0) & (dca == 0)] == 1).all()
  assert ((dca == 1) & (weights == 1)).sum() == segments.max(axis=1).sum()
  assert ((dca == 1) & (weights == 0)).sum() > 0


def test_prefix_lm_splits_are_uniform_and_lossless(corpus_source, vocabulary):
  examples = _examples(corpus_source, vocabulary, "prefix_lm", {"inputs": 40, "targets": 40}, num=2000,
                       split="train")
  splits = [len(ex["inputs"]) - 1 for ex in examples if len(ex["inputs"]) + len(ex["targets"]) == 39 + 2]
  # Full segments are 39 tokens; the split point is uniform over 1..38.
  counts = np.bincount(splits, minlength=39)[1:]
  assert len(splits) > 1000 and counts.min() > 0.4 * len(splits) / 38
  text = vocabulary.decode(sum((ex["inputs"][:-1].tolist() + ex["targets"][:-1].tolist() for ex in examples[:5]), []))
  # Documents are concatenated as T5 does, without separators; each starts with SentencePiece's space.
  assert text in " ".join(corpus_source.texts("train"))


@pytest.mark.parametrize("name", ["prefix_lm", "prefix_lm_decoder"])
def test_a_fixed_prefix_share_splits_every_full_segment_there(corpus_source, vocabulary, name):
  examples = _examples(corpus_source, vocabulary, name, {"inputs": 40, "targets": 40}, num=200, split="train",
                       prefix_share=0.25)
  eos = int(name == "prefix_lm")  # The encoder's inputs end with EOS; the decoder's prefix does not.
  # Segments are 39 tokens (the targets' budget); the prefix takes round(0.25 * 39) = 10 of a full one.
  full = [(len(ex["inputs"]) - eos, len(ex["targets"]) - 1) for ex in examples
          if len(ex["inputs"]) - eos + len(ex["targets"]) - 1 == 39]
  assert len(full) > 150 and set(full) == {(10, 29)}


@pytest.mark.slow
def test_same_seed_same_examples(corpus_source, vocabulary):
  first = _examples(corpus_source, vocabulary, "ul2", {"inputs": 64, "targets": 64}, num=20, seed=5)
  second = _examples(corpus_source, vocabulary, "ul2", {"inputs": 64, "targets": 64}, num=20, seed=5)
  other = _examples(corpus_source, vocabulary, "ul2", {"inputs": 64, "targets": 64}, num=20, seed=6)
  assert all((a["inputs"] == b["inputs"]).all() for a, b in zip(first, second))
  assert any(len(a["inputs"]) != len(c["inputs"]) or (a["inputs"] != c["inputs"]).any() for a, c in zip(first, other))


def test_ul2_targets_too_short_names_the_denoiser(corpus_source, vocabulary):
  with pytest.raises(UserError, match=r"UL2 X-denoiser \(mean_noise_span_length=3, noise_density=0.5\).*"
                                      r"at inputs_length=128: it needs targets_length >= 126"):
    _examples(corpus_source, vocabulary, "ul2", {"inputs": 128, "targets": 32}, num=1)


def test_vocabulary_without_mode_tokens(corpus_source, tmp_path):
  model = io.BytesIO()
  texts = itertools.islice(corpus_source.texts("train"), 300)
  spm.SentencePieceTrainer.train(sentence_iterator=(t for text in texts for t in text.split("\n\n") if t.strip()),
                                 model_writer=model, vocab_size=500, pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                                 minloglevel=2, logstream=open(os.devnull, "w"))
  path = tmp_path / "plain.model"
  path.write_bytes(model.getvalue())
  with pytest.raises(UserError, match=r"encodes '\[NLU\]' as \d+ pieces"):
    _examples(corpus_source, vocab.load(str(path)), "ul2", {"inputs": 64, "targets": 64}, num=1)


# Every registered objective but clm (which most other tests train) and prefix_lm (its examples are UL2's
# S-denoiser's, its model span corruption's).
END_TO_END = [name for name in objectives.NAMES if name not in ("clm", "prefix_lm")]
# One objective of each generating family samples at the end of its run (decoding is the family's, and costs a
# compilation per run).
SAMPLED = ("span_corruption", "prefix_lm_decoder", "fim")


@pytest.fixture(scope="module")
def end_to_end_runs(tmp_path_factory, run_train):
  """objective -> (exit status, stdout, stderr) of 2 TINY steps of each END_TO_END objective (SAMPLED ones sample),
  each run in this process (run_train)."""
  root = tmp_path_factory.mktemp("objectives")
  args = ["--config.data.inputs_length=48", "--config.data.targets_length=48", "--config.train.steps=2",
          "--config.model.dropout=0.1"]  # contrastive's views need dropout
  runs = {}
  for objective in END_TO_END:
    result = run_train(root / objective, *args, f"--config.data.objective={objective}",
                       f"--config.sample.num={int(objective in SAMPLED)}")
    runs[objective] = (result.returncode, result.stdout, result.stderr)
  runs["root"] = root
  return runs


@pytest.mark.slow
@pytest.mark.parametrize("objective", END_TO_END)
def test_objectives_train_end_to_end(end_to_end_runs, objective):
  code, stdout, stderr = end_to_end_runs[objective]
  assert code == 0, stderr
  assert "Trained 2 steps" in stdout
  # The end-of-run sample: each generating family's decoding (causal, prefix-LM, encoder-decoder).
  assert ("\n>>> " in stdout) == (objective in SAMPLED), stdout


def test_one_objective_of_each_generating_family_samples():
  families = {objectives.get(name).family.name for name in END_TO_END if objectives.get(name).family.generates}
  assert {objectives.get(name).family.name for name in SAMPLED} == families


@pytest.mark.slow
def test_electra_checkpoints_hold_both_and_export_the_discriminator(end_to_end_runs, tmp_path):
  from pretrain import hf, run as run_lib  # pylint: disable=g-import-not-at-top
  import safetensors.numpy  # pylint: disable=g-import-not-at-top
  assert end_to_end_runs["electra"][0] == 0
  workdir = str(end_to_end_runs["root"] / "electra")
  run, params, _ = run_lib.load(workdir)
  assert {"generator", "discriminator", "embed", "discriminator_head"} <= set(params)
  out = tmp_path / "export"
  assert hf.export(str(out), run, params) == "PretrainElectraDiscriminator"
  config = json.loads((out / "config.json").read_text())
  assert config["is_causal"] is False and config["num_hidden_layers"] == run.cfg.model.num_layers
  weights = safetensors.numpy.load_file(str(out / "model.safetensors"))
  assert "discriminator_head.weight" in weights and not any("generator" in k for k in weights)
  assert (out / "tokenizer.json").exists() and not (out / "generation_config.json").exists()


@pytest.mark.slow
def test_inspect_task(vocabulary, run_pretrain):
  del vocabulary  # Cached, so the tool reuses it.
  listed, shown, text, pairs = [(r.returncode, r.stdout, r.stderr) for r in (run_pretrain(*argv) for argv in [
      ["inspect-task", "--list"],
      ["inspect-task", "--task=corpus_span_corruption", "--num=2", "--inputs_length=64", "--targets_length=32",
       "--json"],
      ["inspect-task", "--task=corpus_span_corruption", "--num=1"],
      ["inspect-task", "--task=corpus_sop", "--num=1"]])]
  for code, _, stderr in (listed, shown, text, pairs):
    assert code == 0, stderr
  assert {"corpus_clm", "corpus_span_corruption", "corpus_ul2", "corpus_ul2_decoder"} <= set(listed[1].split())
  lines = [json.loads(l) for l in shown[1].splitlines()]
  assert lines[0] == {"vocab_size": 4096, "eos_id": 1, "pad_id": 0}
  assert len(lines) == 3 and all(len(ex["inputs"]) <= 64 and ex["targets"][0] == 4095 for ex in lines[1:])
  assert "<extra_id_0>" in text[1]
  assert "--- pair_label (1 tokens)\n[" in pairs[1] and "--- weights (" in pairs[1]
  # Both segments of the pair, the EOS between them shown (decoding stopped at it).
  inputs = pairs[1].split("--- inputs (")[1].split("\n--- ")[0]
  assert inputs.count("</s>") == 1 and inputs.split("</s>")[1].strip(), inputs
  assert {"corpus_nsp", "corpus_sop", "corpus_electra", "corpus_contrastive"} <= set(listed[1].split())


@pytest.mark.parametrize("length", [16, 128])
@pytest.mark.parametrize("name", objectives.NAMES)
def test_no_example_outgrows_its_lengths_before_trimming(corpus_source, vocabulary, name, length):
  """Every objective (UL2: every denoiser) sizes its examples to fit; seqio would otherwise cut the last
  token, the EOS. Checked on the untrimmed features; EOS ends every example whose objective ends it so."""
  import seqio  # pylint: disable=g-import-not-at-top
  data_cfg = configs.load("quickstart").data
  objective = objectives.make(name, data_cfg, seed=0)
  task = tasks.register(corpus_source, vocabulary, objective)
  lengths = dict.fromkeys(objective.family.task_features, length)
  try:
    dataset = seqio.get_mixture_or_task(task).get_dataset(lengths, split="validation", shuffle=False, seed=0,
                                                          trim_output_features=False)
    examples = list(itertools.islice(dataset.as_numpy_iterator(), 400))
  except UserError:
    pytest.skip(f"{name} does not fit {length} tokens (refused with a message)")
  assert examples
  for example in examples:
    assert all(len(example[k]) <= lengths[k] for k in lengths), {k: len(v) for k, v in example.items()}
  ends_with_eos = ["targets"] * (name not in ("clm", "fim", "mlm", "electra", "contrastive")) + ["inputs"] * objective.family.inputs_end_with_eos
  for feature in ends_with_eos:
    assert all(example[feature][-1] == vocab.EOS_ID for example in examples), feature


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["ul2", "ul2_decoder"])
def test_generate_with_a_mode_token_reads_the_prompt_as_the_s_denoiser_s_inputs(end_to_end_runs, objective,
                                                                               corpus_source, vocabulary,
                                                                               monkeypatch, capsys):
  """`generate --mode=[S2S]` gives the model the S-denoiser's form of its examples' inputs, the prompt as their
  text (an encoder-decoder's: mode token, text, EOS, no sentinel; a decoder's: mode token, text); without --mode
  an encoder-decoder fills a span after the prompt."""
  from pretrain.commands import generate  # pylint: disable=g-import-not-at-top
  from pretrain.models import decoding  # pylint: disable=g-import-not-at-top
  read = []
  for name in ("generate", "generate_encoder_decoder"):
    def spied(model, params, rows, *args, _original=getattr(decoding, name), **kwargs):
      read.append(np.asarray(rows)[0].tolist())
      return _original(model, params, rows, *args, **kwargs)
    monkeypatch.setattr(decoding, name, spied)
  workdir = end_to_end_runs["root"] / objective
  s2s = vocab.single_piece_id(vocabulary, "[S2S]")
  [example] = _examples(corpus_source, vocabulary, objective, {"inputs": 48, "targets": 48}, num=1,
                        ul2_denoisers=(("S", 0, 0, 1.0),))
  inputs = [int(t) for t in example["inputs"]]
  assert inputs[0] == s2s and not set(inputs) & {vocab.sentinel_id(vocabulary, i) for i in range(2)}
  for mode in ("[S2S]", None):
    generate.main([f"--workdir={workdir}", "--prompt=The cat sat on the", "--max_new_tokens=3",
                   *([f"--mode={mode}"] if mode else [])])
    capsys.readouterr()
    prompt = [*([s2s] if mode else []), *vocabulary.encode("The cat sat on the")]
    if objective == "ul2":
      end = [vocab.EOS_ID] if mode else [vocab.sentinel_id(vocabulary, 0), vocab.EOS_ID]
      assert (inputs[-1] == vocab.EOS_ID) and read.pop() == prompt + end
    else:
      assert vocab.EOS_ID not in inputs and read.pop() == prompt
  with pytest.raises(SystemExit):
    generate.main([f"--workdir={end_to_end_runs['root'] / 'span_corruption'}", "--prompt=a", "--mode=[S2S]"])
  assert "'[S2S]' is not a mode token this run trained with" in capsys.readouterr().err


def test_a_prefix_lm_decoder_says_that_data_seq_len_is_not_its_row():
  """data.seq_len=32 beside a prefix-LM decoder's inputs + targets of 64: its rows are 64 tokens, twice a causal
  LM's of seq_len, said as the run starts (a comparison at 'seq_len=32' was not one)."""
  cfg = _data_cfg(objective="prefix_lm_decoder", seq_len=32, inputs_length=32, targets_length=32)
  assert objectives.get("prefix_lm_decoder").family.length_note(cfg).startswith(
      "Note: a prefix-LM row holds data.inputs_length + data.targets_length = 64 tokens; data.seq_len=32")
  cfg.seq_len = 64
  assert objectives.get("prefix_lm_decoder").family.length_note(cfg) is None
  assert objectives.get("clm").family.length_note(cfg) is None
