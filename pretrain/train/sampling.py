"""Sample continuations of validation prompts, shown at the end of a run."""

import jax

from pretrain import vocab as text_vocab
from pretrain.system.console import log
from pretrain.system.errors import UserError


def samples(run, params) -> list[tuple[str, str]]:
  """(prompt, continuation) pairs from the starts of validation documents; none for a family that does
  not generate (MLM). An encoder-decoder model fills in a span after the prompt."""
  c = run.cfg.sample
  if c.num <= 0 or not run.family.generates:
    return []
  try:  # What `pretrain generate` refuses: positions the model never trained on.
    run.family.check_prompt(c.prompt_tokens, c.max_new_tokens, run.task_lengths)
  except UserError as e:
    log(f"No end-of-run samples: sample.prompt_tokens={c.prompt_tokens} and sample.max_new_tokens="
        f"{c.max_new_tokens} do not fit the rows ({e.problem.split('; ')[0]}); lower them to see samples")
    return []
  if run.source is None:  # data.task's documents are its own.
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
