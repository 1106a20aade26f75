"""Sample continuations of validation prompts, shown at the end of a run."""

import jax

from pretrain import vocab as text_vocab


def samples(run, params) -> list[tuple[str, str]]:
  """(prompt, continuation) pairs from the starts of validation documents; none for a family that does
  not generate (MLM). An encoder-decoder model fills in a span after the prompt."""
  c = run.cfg.sample
  if c.num <= 0 or not run.family.generates or run.source is None:  # None: data.task's documents are its own.
    return []
  prompts = []
  for text in run.source.texts("validation"):
    ids = run.vocabulary.encode(text)
    if len(ids) >= c.prompt_tokens:
      prompts.append(ids[:c.prompt_tokens])
    if len(prompts) == c.num:
      break
  if not prompts:
    return []
  params = jax.device_put(params, jax.sharding.NamedSharding(run.mesh, jax.sharding.PartitionSpec()))
  continuations = run.family.generate(
      run.model, params, prompts, c.max_new_tokens, jax.random.key(run.cfg.train.seed),
      sentinel=text_vocab.sentinel_id(run.vocabulary, 0), temperature=c.temperature, num_valid=run.vocabulary.vocab_size)
  return [(run.vocabulary.decode(p), run.vocabulary.decode(n)) for p, n in zip(prompts, continuations)]
