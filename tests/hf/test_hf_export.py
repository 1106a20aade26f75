"""Export to and import from the Hugging Face format, checked against transformers itself."""

import json
import os
import shutil
import stat
import tracemalloc
import contextlib

import jax
import jax.numpy as jnp
from flax import linen as nn
import numpy as np
import pytest
import torch
import transformers

from pretrain import hf, run as run_lib
from pretrain.experiments import arms
from pretrain.models import decoding
from pretrain.system.errors import UserError
from pretrain.vocab import pipeline as vocab
from tests import numerics, one_process
from tests.conftest import REPO, tiny_config, tiny_run

LLAMA_SHAPES = {
    "gqa": dict(d_model=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, mlp_dim=160),
    "three_heads_tied_odd_vocab_scanned": dict(d_model=48, num_layers=2, num_heads=3, num_kv_heads=3, head_dim=8,
                                               mlp_dim=96, tie_embeddings=True, vocab_size=4111, scan_layers=True,
                                               rope_theta=500.0, norm_eps=1e-5),
}
T5_SHAPES = {
    "small": dict(d_model=64, num_layers=2, num_decoder_layers=3, num_heads=4, head_dim=16, mlp_dim=96),
    "six_heads_odd_vocab_scanned": dict(d_model=48, num_layers=2, num_decoder_layers=2, num_heads=6, head_dim=8,
                                        mlp_dim=64, vocab_size=4100, scan_layers=True,
                                        relative_attention_num_buckets=16, relative_attention_max_distance=64),
    "relu_v1_0": dict(d_model=48, num_layers=2, num_decoder_layers=2, num_heads=4, head_dim=12, mlp_dim=64,
                      feed_forward="relu"),
}
# Switch Transformers: ReLU layers and experts, top-1 with the raw router probability; experts every layer
# (unrolled, capacity ample enough to drop nothing) and every other layer (scanned: units of two layers).
SWITCH_SHAPES = {
    "every1_capacity": dict(d_model=48, num_layers=2, num_decoder_layers=2, num_heads=4, head_dim=12, mlp_dim=64,
                            feed_forward="relu", moe_experts=3, moe_top_k=1, moe_normalize_top_k=False,
                            moe_capacity_factor=8.0),
    "every2_scanned": dict(d_model=48, num_layers=4, num_decoder_layers=4, num_heads=4, head_dim=12, mlp_dim=64,
                           feed_forward="relu", moe_experts=4, moe_top_k=1, moe_normalize_top_k=False, moe_every=2,
                           scan_layers=True),
}
# Mixtral: experts in every layer, scanned, grouped queries, top-1 (unrolled experts: Qwen2-MoE below, and the
# Mixtral that transformers writes).
MIXTRAL_SHAPES = {
    "gqa_scanned_top1": dict(d_model=48, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=12, mlp_dim=96,
                             moe_experts=3, moe_top_k=1, scan_layers=True),
}
# Qwen2-MoE: experts every other layer, raw top-k weights; with a gated shared expert (scanned: units of two
# layers), and without one (transformers' model always has it: exported empty).
QWEN2_MOE_SHAPES = {
    "shared_every2_scanned": dict(d_model=64, num_layers=4, num_heads=4, num_kv_heads=2, head_dim=16, mlp_dim=160,
                                  moe_experts=4, moe_top_k=2, moe_mlp_dim=48, moe_every=2, moe_shared_mlp_dim=40,
                                  moe_normalize_top_k=False, scan_layers=True),
    "no_shared_every2": dict(d_model=48, num_layers=2, num_heads=4, num_kv_heads=4, head_dim=12, mlp_dim=96,
                             moe_experts=3, moe_top_k=2, moe_every=2),
}
MAX_LENGTH = 128


def _random_model(objective, vocabulary, shape):
  """A run (pretrain.run) of `objective` with a model of `shape`, and its random parameters."""
  lengths = ("--config.data.seq_len=128",) if objective == "clm" else ("--config.data.inputs_length=64",
                                                                       "--config.data.targets_length=64")
  run = tiny_run(f"--config.data.objective={objective}", *lengths,
                 *(f"--config.model.{k}={v}" for k, v in shape.items()), vocab_size=vocabulary.vocab_size)
  args = [jnp.zeros((1, 8), jnp.int32)] * len(run.example_args)
  params = nn.meta.unbox(run.model.init(jax.random.key(1), *args)["params"])
  # Norm scales start at one; perturb them so a mix-up of norms would show.
  params = jax.tree_util.tree_map_with_path(
      lambda path, x: x * (1.0 + 0.1 * jax.random.normal(jax.random.key(len(path)), x.shape))
      if "scale" in jax.tree_util.keystr(path) else x, jax.tree.map(jnp.asarray, params))
  return run, params


def _export(tmp_path, run, params, vocabulary, **kwargs):
  out = str(tmp_path / "hf")
  hf.export(out, run, params, vocabulary, **kwargs)
  return out


def test_an_export_copies_one_shard_at_a_time(tmp_path, vocabulary):
  """The float32 copies of the Hugging Face tensors (transposed views of the parameters) are made as each shard
  is written: the export's own allocations peak near a shard (an eighth of this 63 MB model), not near the
  model (all its copies at once before)."""
  run, params = _random_model("clm", vocabulary, {"d_model": 512, "num_layers": 4, "num_heads": 8, "num_kv_heads": 8,
                                                  "head_dim": 64, "mlp_dim": 1536})
  params = jax.tree.map(np.asarray, params)  # On the host already, as a restored checkpoint's are.
  model_bytes = sum(x.size * 4 for x in jax.tree.leaves(params))
  tracemalloc.start()
  try:
    out = _export(tmp_path, run, params, vocabulary, max_shard_size=model_bytes // 8)
    peak = tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()
  assert len([f for f in os.listdir(out) if f.endswith(".safetensors")]) >= 8
  assert peak < model_bytes / 3, (peak, model_bytes)


def _text_ids(vocabulary, corpus_source, count):
  text = next(t for t in corpus_source.texts("validation") if len(vocabulary.encode(t)) > count)
  return vocabulary.encode(text)[:count]


def _check_llama(out, model, params, ids, architecture="LlamaForCausalLM"):
  config = json.load(open(os.path.join(out, "config.json")))
  assert config["rope_theta"] == config["rope_parameters"]["rope_theta"]  # transformers 4 reads the first.
  theirs = transformers.AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
  assert type(theirs).__name__ == architecture
  tokens = np.asarray([[0] + ids])
  ours = np.asarray(model.apply({"params": params}, jnp.asarray(tokens)))
  with torch.no_grad():
    reference = theirs(torch.from_numpy(tokens)).logits.numpy()
  assert np.abs(ours - reference).max() < 1e-4
  prompt = ids[:8]
  greedy = np.asarray(decoding.generate(model, params, jnp.asarray([prompt]), 20, jax.random.key(0)))[0]
  with torch.no_grad():
    # Without an attention mask, as a user may call it: id 0, the BOS, is no pad token that it would mask.
    generated = theirs.generate(torch.tensor([[0] + prompt]), max_new_tokens=20,
                                do_sample=False)[0, len(prompt) + 1:].numpy()
  _assert_same_greedy(greedy, generated, theirs.config.eos_token_id)


def _check_t5(out, model, params, ids, architecture="T5ForConditionalGeneration"):
  theirs = transformers.AutoModelForSeq2SeqLM.from_pretrained(out, attn_implementation="eager").eval()
  assert type(theirs).__name__ == architecture
  inputs, targets = np.asarray([ids[:40]]), np.asarray([[0] + ids[40:60]])
  ours = np.asarray(model.apply({"params": params}, jnp.asarray(inputs), jnp.asarray(targets)))
  with torch.no_grad():
    reference = theirs(input_ids=torch.from_numpy(inputs), decoder_input_ids=torch.from_numpy(targets)).logits.numpy()
  assert np.abs(ours - reference).max() < 1e-4
  greedy = np.asarray(decoding.generate_encoder_decoder(model, params, jnp.asarray(inputs), 20, jax.random.key(0)))[0]
  with torch.no_grad():
    # As a user calls it: transformers' T5 cache sizes itself by the encoder's depth, and an export whose decoder
    # differs says use_cache false (generation_config.json), where generate failed with an IndexError.
    generated = theirs.generate(torch.from_numpy(inputs), max_new_tokens=20, do_sample=False)[0, 1:].numpy()
  _assert_same_greedy(greedy, generated, theirs.config.eos_token_id)


def _assert_same_greedy(ours, theirs, eos_id):
  """transformers stops at the end-of-sequence token (and `min_new_tokens` would forbid it, changing the argmax);
  ours runs on to its length. Equal up to where theirs stops, and theirs stops only there."""
  assert len(theirs) == len(ours) or theirs[-1] == eos_id, (ours, theirs)
  np.testing.assert_array_equal(ours[:len(theirs)], theirs)


# muP with the head width grown 4x from its base: queries times 1/2 (models/mup.py), folded into the export.
MUP = dict(parameterization="mup", mup_base_width=32, mup_base_head_dim=4)
LLAMA_SHAPES["mup"] = {**LLAMA_SHAPES["gqa"], **MUP}
T5_SHAPES["mup"] = {**T5_SHAPES["small"], **MUP}
RANDOM_MODELS = {f"llama_{name}": ("clm", shape) for name, shape in LLAMA_SHAPES.items()}
RANDOM_MODELS.update({f"t5_{name}": ("span_corruption", shape) for name, shape in T5_SHAPES.items()})
RANDOM_MODELS.update({f"mixtral_{name}": ("clm", shape) for name, shape in MIXTRAL_SHAPES.items()})
RANDOM_MODELS.update({f"qwen2_moe_{name}": ("clm", shape) for name, shape in QWEN2_MOE_SHAPES.items()})
SHARDED = "qwen2_moe_shared_every2_scanned"  # Exported in shards of 100 KB: transformers and the import read them.
RANDOM_MODELS.update({f"switch_{name}": ("span_corruption", shape) for name, shape in SWITCH_SHAPES.items()})
MOE_ARCHITECTURES = {"mixtral": "MixtralForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM"}


@pytest.mark.slow
@pytest.mark.parametrize("name", RANDOM_MODELS)
def test_random_model_matches_transformers(tmp_path, vocabulary, corpus_source, name):
  objective, shape = RANDOM_MODELS[name]
  run, params = _random_model(objective, vocabulary, shape)
  sharded = name == SHARDED
  out = _export(tmp_path, run, params, vocabulary, **({"max_shard_size": "100KB"} if sharded else {}))
  shards = [n for n in os.listdir(out) if n.endswith(".safetensors")]
  assert (len(shards) > 2 and os.path.exists(os.path.join(out, "model.safetensors.index.json"))) if sharded else (
      shards == ["model.safetensors"])
  umask = os.umask(0)
  os.umask(umask)
  modes = {name: stat.S_IMODE(os.stat(os.path.join(out, name)).st_mode) for name in os.listdir(out)}
  assert stat.S_IMODE(os.stat(out).st_mode) == 0o777 & ~umask and set(modes.values()) == {0o666 & ~umask}
  ids = _text_ids(vocabulary, corpus_source, 60)
  moe = next((arch for prefix, arch in MOE_ARCHITECTURES.items() if name.startswith(prefix)), None)
  if moe:
    _check_llama(out, run.model, params, ids, architecture=moe)
  elif name.startswith("switch"):
    _check_t5(out, run.model, params, ids, architecture="SwitchTransformersForConditionalGeneration")
  else:
    (_check_llama if objective == "clm" else _check_t5)(out, run.model, params, ids)
  # Import reproduces every parameter exactly, in the layout the config asks for.
  imported = hf.import_params(out, run.family, run.cfg.model, params)
  jax.tree.map(np.testing.assert_array_equal, imported, jax.tree.map(np.asarray, params))


def _import_and_compare_logits(directory, settings, theirs):
  """Imports a transformers checkpoint into a run of `settings` and checks its logits equal `theirs`'."""
  run = tiny_run(*(f"--config.model.{k}={v}" for k, v in settings.items()), vocab_size=256)
  params = hf.import_params(str(directory), run.family, run.cfg.model, run.abstract_state().params)
  tokens = np.random.default_rng(0).integers(3, 256, (2, 24))
  ours = np.asarray(run.model.apply({"params": params}, jnp.asarray(tokens)))
  with torch.no_grad():
    reference = theirs(torch.from_numpy(tokens)).logits.numpy()
  assert np.abs(ours - reference).max() < 1e-4


@pytest.mark.slow
def test_a_mixtral_made_by_transformers_imports_and_gives_its_logits(tmp_path):
  """A checkpoint written by transformers' own save_pretrained (Mixtral's per-expert w1/w2/w3 tensors)."""
  hf_config = transformers.MixtralConfig(vocab_size=256, hidden_size=32, intermediate_size=24, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                         num_local_experts=4, num_experts_per_tok=2, rope_theta=1e4)
  torch.manual_seed(0)
  theirs = transformers.MixtralForCausalLM(hf_config).eval()
  theirs.save_pretrained(tmp_path / "mixtral")
  with open(tmp_path / "mixtral" / "config.json") as f:
    settings, unsupported = hf.mixtral.model_config(json.load(f))
  assert not unsupported and settings["moe_experts"] == 4 and settings["num_kv_heads"] == 2
  _import_and_compare_logits(tmp_path / "mixtral", settings, theirs)


def test_a_llama_whose_tokenizer_has_metas_ids_is_refused_by_name(tmp_path):
  """Meta's and Mistral's SentencePiece models put unknown, BOS and EOS at ids 0, 1, 2, where T5's (and ours) put
  pad, EOS and unknown: the import names that, not a vocabulary to train."""
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top  (only this test trains one)
  (tmp_path / "llama").mkdir()
  (tmp_path / "text.txt").write_text("".join(f"line {i} of a few words, some longer than others\n" for i in range(200)))
  spm.SentencePieceTrainer.train(input=str(tmp_path / "text.txt"), model_prefix=str(tmp_path / "llama" / "tokenizer"),
                                 vocab_size=60, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
  (tmp_path / "llama" / "config.json").write_text(json.dumps(
      {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
       "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 60, "rope_theta": 1e4}))
  with pytest.raises(UserError, match=r"tokenizer.model' does not put pad, EOS and unknown at ids \(0, 1, 2\).*"
                                      "Meta's and Mistral's own tokenizers"):
    hf.import_config(tiny_config(), str(tmp_path / "llama"))


def test_a_mistral_made_by_transformers_imports_and_gives_its_logits(tmp_path):
  """Mistral without its sliding window is Llama's model under another name; with a window it is refused."""
  hf_config = transformers.MistralConfig(vocab_size=256, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, rope_theta=1e4,
                                         sliding_window=None)
  torch.manual_seed(0)
  theirs = transformers.MistralForCausalLM(hf_config).eval()
  theirs.save_pretrained(tmp_path / "mistral")
  with open(tmp_path / "mistral" / "config.json") as f:
    saved = json.load(f)
  assert hf.imported(saved["model_type"]) is hf.mistral
  settings, unsupported = hf.mistral.model_config(saved)
  assert not unsupported and hf.mistral.model_config({**saved, "sliding_window": 16})[1] == ["sliding_window"]
  # A transformers 4 config.json with a RoPE scaling (Llama 3's) is refused, not read as plain RoPE.
  older = {k: v for k, v in saved.items() if k != "rope_parameters"}
  llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
  assert hf.llama.model_config({**older, "rope_theta": 5e5, "rope_scaling": None})[0]["rope_theta"] == 5e5
  assert hf.llama.model_config({**older, "rope_scaling": llama3})[1] == ["rope_scaling.rope_type"]
  linear = {"type": "linear", "factor": 2.0}
  assert hf.llama.model_config({**older, "rope_scaling": linear})[1] == ["rope_scaling.rope_type"]
  _import_and_compare_logits(tmp_path / "mistral", settings, theirs)


@pytest.mark.slow
def test_a_switch_transformer_made_by_transformers_imports_and_gives_its_logits(tmp_path):
  """A checkpoint written by transformers' save_pretrained (per-expert wi/wo, a router per sparse layer), with
  the one embedding table our model has, untied from the output; refused when its stacks' embeddings differ."""
  hf_config = transformers.SwitchTransformersConfig(
      vocab_size=300, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=2, num_heads=4, num_experts=4,
      expert_capacity=1 << 30, encoder_sparse_step=2, decoder_sparse_step=2, num_sparse_encoder_layers=1,
      num_sparse_decoder_layers=1, tie_word_embeddings=False, router_jitter_noise=0.0)
  torch.manual_seed(0)
  theirs = transformers.SwitchTransformersForConditionalGeneration(hf_config).eval()
  theirs.encoder.embed_tokens.weight = theirs.decoder.embed_tokens.weight = theirs.shared.weight
  theirs.save_pretrained(tmp_path / "switch")
  with open(tmp_path / "switch" / "config.json") as f:
    settings, unsupported = hf.switch_transformers.model_config(json.load(f))
  assert not unsupported and (settings["moe_experts"], settings["moe_every"]) == (4, 2)
  run = tiny_run("--config.data.objective=span_corruption", *(f"--config.model.{k}={v}" for k, v in settings.items()),
                 vocab_size=300)
  params = hf.import_params(str(tmp_path / "switch"), run.family, run.cfg.model, run.abstract_state().params)
  rng = np.random.default_rng(0)
  inputs, targets = rng.integers(3, 300, (2, 24)), rng.integers(3, 300, (2, 12))
  ours = np.asarray(run.model.apply({"params": params}, jnp.asarray(inputs), jnp.asarray(targets)))
  with torch.no_grad():
    reference = theirs(input_ids=torch.from_numpy(inputs), decoder_input_ids=torch.from_numpy(targets)).logits.numpy()
  assert np.abs(ours - reference).max() < 1e-4

  import safetensors.numpy  # pylint: disable=g-import-not-at-top
  weights = tmp_path / "switch" / hf.WEIGHTS
  tensors = safetensors.numpy.load_file(str(weights))
  tensors["decoder.embed_tokens.weight"] = tensors["shared.weight"] + 1.0  # Saved once, as tied; now apart.
  safetensors.numpy.save_file(tensors, str(weights), metadata={"format": "pt"})
  with pytest.raises(UserError, match="decoder.embed_tokens differs from its shared embedding"):
    hf.import_params(str(tmp_path / "switch"), run.family, run.cfg.model, run.abstract_state().params)


def test_import_reads_a_sharded_checkpoint(tmp_path, vocabulary):
  """Large Hub checkpoints come as model-0000N-of-0000M.safetensors shards listed in model.safetensors.index.json."""
  import safetensors.numpy  # pylint: disable=g-import-not-at-top
  run, params = _random_model("clm", vocabulary, LLAMA_SHAPES["gqa"])
  out = _export(tmp_path, run, params, vocabulary)
  tensors = safetensors.numpy.load_file(os.path.join(out, hf.WEIGHTS))
  names = sorted(tensors)
  shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
  for shard, keys in shards.items():
    safetensors.numpy.save_file({k: tensors[k] for k in keys}, os.path.join(out, shard), metadata={"format": "pt"})
  with open(os.path.join(out, hf.WEIGHTS + ".index.json"), "w") as f:
    json.dump({"metadata": {}, "weight_map": {k: shard for shard, keys in shards.items() for k in keys}}, f)
  os.remove(os.path.join(out, hf.WEIGHTS))
  imported = hf.import_params(out, run.family, run.cfg.model, params)
  jax.tree.map(np.testing.assert_array_equal, imported, jax.tree.map(np.asarray, params))
  first = os.path.join(out, "model-00001-of-00002.safetensors")
  with open(first, "rb") as f:
    whole = f.read()
  with open(first, "wb") as f:  # A download cut short.
    f.write(whole[:len(whole) // 2])
  with pytest.raises(UserError, match="model-00001-of-00002.safetensors' is damaged .*: it was cut short or is not a "
                                      "safetensors file; download or export it again"):
    hf.import_params(out, run.family, run.cfg.model, params)
  os.remove(os.path.join(out, "model-00002-of-00002.safetensors"))
  with pytest.raises(UserError, match="lists model-00002-of-00002.safetensors, which .* lacks; download every shard"):
    hf.import_params(out, run.family, run.cfg.model, params)


def test_exported_tokenizer_encodes_like_the_vocabulary(tmp_path, vocabulary, corpus_source):
  run, params = _random_model("clm", vocabulary, {})
  out = _export(tmp_path, run, params, vocabulary)
  tokenizer = transformers.AutoTokenizer.from_pretrained(out)
  texts = [t for _, t in zip(range(60), corpus_source.texts("validation"))]
  texts += ["Special [NLU] pieces <MID> and a sentinel <extra_id_3> in\n\ttabs,  spaces, é and 漢字 and 🙂."]
  for text in texts:
    ours, theirs = vocabulary.encode(text), tokenizer(text, add_special_tokens=False)["input_ids"]
    # Pieces that tile a text in two orders (a run of spaces) score the same both ways: SentencePiece's float32
    # sums pick one order, the tokenizer's float64 sums may pick the other (docs/guide/generation.md).
    assert theirs == ours or (sorted(theirs) == sorted(ours) and tokenizer.decode(theirs) == text), text
    assert tokenizer(text)["input_ids"] == [vocab.PAD_ID] + theirs  # BOS is id 0, as in training.
  assert tokenizer.decode(vocabulary.encode(texts[0])) == texts[0]
  run, params = _random_model("span_corruption", vocabulary, {})
  t5_tokenizer = transformers.AutoTokenizer.from_pretrained(_export(tmp_path / "t5", run, params, vocabulary))
  assert t5_tokenizer(texts[-1])["input_ids"] == vocabulary.encode(texts[-1]) + [vocab.EOS_ID]  # As seqio's inputs.


def _export_cli(workdir, out):
  with contextlib.chdir(REPO):
    return one_process.in_this_process(["export", f"--workdir={workdir}", f"--out={out}"])


def _trained(workdir):
  """(run, parameters) of a workdir's latest checkpoint."""
  run, params, _ = run_lib.load(str(workdir))
  return run, params


def _eval_losses(workdir):
  records = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
  return {r["step"]: r["eval/loss"] for r in records if "eval/loss" in r}


@pytest.mark.slow
def test_trained_llama_exports_and_continues_from_the_export(tmp_path, run_train, run_pretrain, corpus_source):
  first = tmp_path / "first"
  assert run_train(first, "--config.train.steps=3", "--config.model.num_kv_heads=1").returncode == 0
  out = tmp_path / "hf"
  result = _export_cli(first, out)
  assert result.returncode == 0, result.stderr
  assert "LlamaForCausalLM" in result.stdout
  run, params = _trained(first)
  _check_llama(str(out), run.model, params, _text_ids(run.vocabulary, corpus_source, 30))
  # Pre-training continues from the export: the first evaluation equals the exported run's last.
  second = tmp_path / "second"
  result = run_train(second, "--config.train.steps=1", f"--config.train.init_from_hf={out}",
                     "--config.model.d_model=64", "--config.model.num_kv_heads=2",  # Replaced by the import ...
                     "--config.model.moe_experts=4", "--config.model.moe_mlp_dim=32")  # ... of a dense model.
  assert result.returncode == 0, result.stderr
  assert "Initialising from" in result.stderr + result.stdout
  assert json.load(open(second / "config.json"))["model"]["moe_experts"] == 0
  # The model, a log-softmax over the vocabulary, the mean over TINY's evaluation batches (2 x 4 rows of 32).
  terms = numerics.transformer_terms(run.model.config, 32) + run.vocab_size + 2 * 4 * 32
  numerics.assert_close(_eval_losses(second)[0], _eval_losses(first)[3], terms=terms)
  assert json.load(open(second / "config.json"))["model"]["d_model"] == 32
  # An experiment's rerun (pretrain/experiments/arms.py) takes the run as the config the import wrote, its own.
  arms.refuse_another_run(tiny_config("--config.train.steps=1", f"--config.train.init_from_hf={out}",
                                      "--config.model.d_model=64", "--config.model.num_kv_heads=2",
                                      "--config.model.moe_experts=4", "--config.model.moe_mlp_dim=32"), str(second))
  stable = tmp_path / "stable"  # A wsd run from the export, for a cooldown branch below.
  result = run_train(stable, "--config.train.steps=2", f"--config.train.init_from_hf={out}",
                     "--config.optimizer.schedule=wsd", "--config.optimizer.warmup_steps=0",
                     "--config.train.checkpoint_every=1")
  assert result.returncode == 0, result.stderr
  # Resumed once the directory is gone (a preempted machine's disk): as the checkpoints record the import.
  shutil.rmtree(out)
  result = run_train(second, "--config.train.steps=2", f"--config.train.init_from_hf={out}")
  assert result.returncode == 0, result.stderr
  assert "is gone: resuming with the model its import set" in result.stdout + result.stderr
  assert "Resuming from the checkpoint at step 1" in result.stdout + result.stderr
  # A cooldown branch of a run that started from the export needs the directory no more either.
  branch = run_pretrain("cooldown", f"--workdir={stable}", "--from_step=1", "--steps=1", f"--out={tmp_path}/branch")
  assert branch.returncode == 0, branch.stderr
  assert json.load(open(tmp_path / "branch" / "config.json"))["model"]["d_model"] == 32


@pytest.mark.slow
def test_trained_t5_exports(tmp_path, run_train, run_pretrain, corpus_source):
  workdir = tmp_path / "run"
  result = run_train(workdir, "--config.train.steps=3", "--config.data.objective=span_corruption",
                     "--config.data.inputs_length=32", "--config.data.targets_length=16",
                     "--config.model.scan_layers=true", "--config.model.num_layers=2")
  assert result.returncode == 0, result.stderr
  # pretrain eval on this run (here, where a trained T5 is at hand): UL2's X-denoisers need longer targets than 16,
  # so its task is named with why and the tasks that fit, not offered and then refused by its own check.
  unfit = run_pretrain("eval", f"--workdir={workdir}", "--task=corpus_ul2")
  assert unfit.returncode == 2 and "--task='corpus_ul2': the run's lengths cannot hold its examples (" in unfit.stderr
  assert "use one of corpus_bart, corpus_mass, corpus_prefix_lm, corpus_span_corruption\n" in unfit.stderr
  out = tmp_path / "hf"
  assert "T5ForConditionalGeneration" in _export_cli(workdir, out).stdout
  run, params = _trained(workdir)
  _check_t5(str(out), run.model, params, _text_ids(run.vocabulary, corpus_source, 60))


@pytest.mark.slow
def test_bad_exports_and_imports_are_refused(tmp_path, run_train, trained_run, vocabulary):
  workdir = tmp_path / "run"
  shutil.copytree(trained_run, workdir)  # Its config is changed below.
  config = json.load(open(workdir / "config.json"))
  config["model"]["mlp_dim"] = 80
  json.dump(config, open(workdir / "config.json", "w"))
  # The checkpoints record their config: the export is theirs, and says so.
  result = _export_cli(workdir, tmp_path / "recorded")
  assert result.returncode == 0 and "(model.mlp_dim=80 there, 64 recorded)" in result.stdout, result.stderr
  assert json.load(open(tmp_path / "recorded" / "config.json"))["intermediate_size"] == 64
  # Checkpoints that record none (written before they did): their shapes refuse the config, and nothing is written.
  for step in os.listdir(workdir / "checkpoints"):
    metadata = workdir / "checkpoints" / step / "_CHECKPOINT_METADATA"
    if metadata.exists():
      record = json.loads(metadata.read_text())
      record.pop("custom_metadata", None)
      metadata.write_text(json.dumps(record))
  result = _export_cli(workdir, tmp_path / "hf")
  assert result.returncode == 2 and "has shape (32, 64), but the model config implies (32, 80)" in result.stderr
  assert not os.path.exists(tmp_path / "hf")  # Nothing half-written.

  gpt2 = tmp_path / "gpt2"
  gpt2.mkdir()
  (gpt2 / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
  with pytest.raises(UserError, match="'gpt2' model .*only LlamaForCausalLM, MixtralForCausalLM, "
                                      "Qwen2MoeForCausalLM, T5ForConditionalGeneration"):
    hf.read_config(str(gpt2))
  result = run_train(tmp_path / "from_gpt2", f"--config.train.init_from_hf={gpt2}")
  assert result.returncode == 2 and "only LlamaForCausalLM" in result.stderr

  run, params = _random_model("span_corruption", vocabulary, {})
  t5_dir = _export(tmp_path / "t5", run, params, vocabulary)
  result = run_train(tmp_path / "t5_into_clm", f"--config.train.init_from_hf={t5_dir}")
  assert result.returncode == 2 and "holds a t5 model, but data.objective='clm' trains llama" in result.stderr

  switch = {"moe_experts": 4, "moe_every": 2, "num_layers": 2, "feed_forward": "relu", "moe_top_k": 1,
            "moe_normalize_top_k": False}
  for change, reason in [({"feed_forward": "gated"}, "model.feed_forward='gated' .*: model.feed_forward='relu'"),
                         ({"moe_top_k": 2}, "model.moe_top_k=2 .*routes each token to 1 expert"),
                         ({"moe_normalize_top_k": True}, "model.moe_normalize_top_k=True"),
                         ({"moe_every": 3, "num_layers": 3}, "model.moe_every=3 .*: 1 or 2"),
                         ({"moe_mlp_dim": 48}, "model.moe_mlp_dim=48")]:
    run, params = _random_model("span_corruption", vocabulary, {**switch, **change})
    with pytest.raises(UserError, match=f"cannot be exported as SwitchTransformersForConditionalGeneration: {reason}"):
      hf.export(str(tmp_path / "switch"), run, params, vocabulary)
    assert not os.path.exists(tmp_path / "switch")
  run, params = _random_model("clm", vocabulary, {"num_heads": 3, "num_kv_heads": 3})  # 32 wide: heads of 16.
  with pytest.raises(UserError, match=r"LlamaForCausalLM needs model.d_model \(32\) divisible by model.num_heads"):
    hf.export(str(tmp_path / "three_heads"), run, params, vocabulary)
  assert not os.path.exists(tmp_path / "three_heads")
  settings, unsupported = hf.switch_transformers.model_config({
      "model_type": "switch_transformers", "d_model": 8, "d_kv": 4, "d_ff": 16, "num_layers": 2, "num_heads": 2,
      "vocab_size": 300, "num_experts": 4, "dense_act_fn": "gelu", "router_bias": True, "encoder_sparse_step": 2,
      "decoder_sparse_step": 1})
  assert settings["moe_experts"] == 4 and len(unsupported) == 4  # The activation, tied outputs, bias, steps.
