"""KV-cache decoding equals recomputing the whole sequence; sampling filters."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pretrain.models import decoding
from pretrain.models.decoder_only import DecoderOnly, DecoderOnlyConfig

CONFIG = DecoderOnlyConfig(vocab_size=97, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
                           mlp_dim=64)


def _recompute(model, params, prompt_BP, max_new_tokens, prefix_lm):
  """The reference: greedy decoding that runs the full sequence for every new token."""
  batch, prompt_len = prompt_BP.shape
  tokens = np.zeros((batch, prompt_len + 1 + max_new_tokens), np.int32)
  tokens[:, 1:prompt_len + 1] = prompt_BP
  prefix = (np.arange(tokens.shape[1]) <= prompt_len).astype(np.int32)[None].repeat(batch, 0) if prefix_lm else None
  for i in range(prompt_len, prompt_len + max_new_tokens):
    logits = model.apply(params, jnp.asarray(tokens), None, None, None if prefix is None else jnp.asarray(prefix))
    tokens[:, i + 1] = np.asarray(jnp.argmax(logits[:, i], axis=-1))
  return tokens[:, prompt_len + 1:]


@pytest.mark.slow
@pytest.mark.parametrize("prefix_lm, scan", [(False, False), (True, False), (False, True)])
def test_kv_cache_matches_recomputation(prefix_lm, scan):
  model = DecoderOnly(dataclasses.replace(CONFIG, scan_layers=scan))
  params = model.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))
  prompt = np.asarray(jax.random.randint(jax.random.key(1), (3, 7), 3, 97))
  cached = decoding.generate(model, params["params"], jnp.asarray(prompt), 12, jax.random.key(2), prefix_lm=prefix_lm)
  np.testing.assert_array_equal(np.asarray(cached), _recompute(model, params, prompt, 12, prefix_lm))


@pytest.mark.parametrize("prefix_lm", [False, True])
def test_left_padded_prompts_decode_as_each_alone(prefix_lm):
  """Prompts of different lengths in one batch, left-padded: each row's tokens are its own prompt's alone."""
  model = DecoderOnly(CONFIG)
  params = model.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
  prompts = [np.asarray(jax.random.randint(jax.random.key(n), (n,), 3, 97)) for n in (7, 3, 5)]
  rows = np.zeros((3, 7), np.int32)
  for b, prompt in enumerate(prompts):
    rows[b, 7 - len(prompt):] = prompt
  batched = decoding.generate(model, params, jnp.asarray(rows), 10, jax.random.key(2), prefix_lm=prefix_lm,
                              prompt_lengths_B=[len(p) for p in prompts])
  for b, prompt in enumerate(prompts):
    alone = decoding.generate(model, params, jnp.asarray(prompt[None]), 10, jax.random.key(2), prefix_lm=prefix_lm)
    np.testing.assert_array_equal(np.asarray(batched[b]), np.asarray(alone[0]))


def test_top_k_and_top_p_restrict_the_draws():
  logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]]))
  draws = lambda **kw: {int(decoding.sample_next(logits, jax.random.key(i), 1.0, 4, **kw)[0]) for i in range(200)}
  assert draws() == {0, 1, 2, 3}
  assert draws(top_k=2) == {0, 1}
  assert draws(top_p=0.75) == {0, 1}
  assert draws(top_p=0.1) == {0}
  assert int(decoding.sample_next(logits, jax.random.key(0), 0.0, 4)[0]) == 0
  assert int(decoding.sample_next(logits, jax.random.key(0), 0.0, 2)[0]) == 0
  assert draws(top_k=3, top_p=0.99) == {0, 1, 2}
  assert draws(top_k=1000) == {0, 1, 2, 3}  # A k beyond the vocabulary keeps every token.


@pytest.mark.slow
def test_generate_tool(tmp_path, trained_run, run_pretrain):
  workdir = trained_run
  generate = lambda *args: run_pretrain("generate", f"--workdir={workdir}", *args)
  greedy = [generate("--prompt=Return the", "--max_new_tokens=5") for _ in range(2)]
  assert greedy[0].returncode == 0, greedy[0].stderr
  assert greedy[0].stdout == greedy[1].stdout
  sampled = generate("--prompt=Return the", "--max_new_tokens=5", "--temperature=1.0", "--top_k=10")
  assert sampled.returncode == 0, sampled.stderr
  # Without --max_new_tokens: 40, or what the 32 positions leave after the prompt (40 was refused here).
  room = generate("--prompt=Return the")
  assert room.returncode == 0 and room.stdout.startswith(greedy[0].stdout.rstrip("\n")), room.stderr
  too_long = generate("--prompt=" + "word " * 40, "--max_new_tokens=5")  # The tiny model trains on 32 tokens.
  assert too_long.returncode == 2 and "more than the 32 positions" in too_long.stderr
  missing = generate("--prompt=x", "--workdir=" + str(tmp_path / "nothing"))
  assert missing.returncode == 2 and "holds no run" in missing.stderr


@pytest.mark.slow
def test_generate_and_export_start_without_tensorflow_or_seqio(tmp_path, trained_run):
  """Commands that read no data import neither (their seconds of start-up): the vocabulary is text_vocab's."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  from tests.conftest import REPO  # pylint: disable=g-import-not-at-top
  command = ("import runpy, sys\n"
             "sys.argv = ['pretrain', *sys.argv[1:]]\n"
             "try:\n  runpy.run_module('pretrain', run_name='__main__')\n"
             "finally:\n  print('imported:', sorted({'tensorflow', 'seqio'} & set(sys.modules)))")
  for args in (["generate", f"--workdir={trained_run}", "--prompt=Return the", "--max_new_tokens=3"],
               ["export", f"--workdir={trained_run}", f"--out={tmp_path / 'hf'}"]):
    result = subprocess.run([sys.executable, "-c", command, *args], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "imported: []", args[0]
  assert (tmp_path / "hf" / "model.safetensors").exists()



def test_generate_prints_what_a_continuation_adds_to_the_prompt(vocabulary):
  """Decoded alone, a SentencePiece continuation loses the space it starts with (read as a text's dummy prefix);
  printed after its prompt's text, it keeps it. An encoder-decoder's span prints as written, sentinels included."""
  from pretrain import families  # pylint: disable=g-import-not-at-top
  ids = vocabulary.encode("The cat sat")
  assert vocabulary.decode(ids[1:]) == "cat sat"
  assert families.CAUSAL_LM.generated_text(vocabulary, ids[:1], ids[1:]) == " cat sat"
  span = [vocabulary.vocab_size - 1, *vocabulary.encode("cat")]
  assert families.ENCODER_DECODER.generated_text(vocabulary, ids, span) == "<extra_id_0> cat"


def test_end_of_run_samples_that_do_not_fit_the_rows_are_named_not_printed(capsys):
  """What `pretrain generate` refuses, the end of a run does not sample (TINY's rows: 32 positions)."""
  from pretrain.train import sampling  # pylint: disable=g-import-not-at-top
  from tests.conftest import tiny_run  # pylint: disable=g-import-not-at-top
  run = tiny_run("--config.sample.num=1", "--config.sample.prompt_tokens=20", "--config.sample.max_new_tokens=20")
  assert sampling.samples(run, params=None) == []
  assert ("No end-of-run samples: sample.prompt_tokens=20 and sample.max_new_tokens=20 do not fit the rows (the "
          "prompt has 20 tokens and 20 new tokens are asked, more than the 32 positions") in capsys.readouterr().out


def test_a_prompt_and_its_new_tokens_may_fill_the_trained_positions():
  """The decoder reads BOS, the prompt and every new token but the last (_recompute's last logits are at
  position prompt + new - 1): 2 + 30 fit 32 trained positions, 3 + 30 do not."""
  from pretrain import objectives  # pylint: disable=g-import-not-at-top
  from pretrain.system.errors import UserError  # pylint: disable=g-import-not-at-top
  family = objectives.get("clm").family
  family.check_prompt(2, 30, {"targets": 32})
  with pytest.raises(UserError, match="the prompt has 3 tokens and 30 new tokens are asked, more than the 32"):
    family.check_prompt(3, 30, {"targets": 32})
