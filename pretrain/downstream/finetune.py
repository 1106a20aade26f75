"""Fine-tuning on a labelled task: the whole model and a linear head on the mean final hidden state of a passage
(the family's representations: a decoder-only model's, an encoder's, an encoder-decoder's encoder), trained with
AdamW for a fixed budget, the same for every model, so that pre-trained and randomly initialised parameters
compare on equal terms. A document's prediction sums the log-probabilities of its passages.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax

STEPS = 300
BATCH = 32
# Of 3e-4, 1e-3, 3e-3 and 1e-2, the best on the package task's validation split (a 300-step, 128-wide model).
LEARNING_RATE = 3e-3
WEIGHT_DECAY = 0.01


def finetune(family, model, params, names: list[str], splits: dict, *, steps: int = STEPS, batch: int = BATCH,
             learning_rate: float = LEARNING_RATE, seed: int = 0) -> dict:
  """Test and validation accuracy after fine-tuning `params` (a copy) on splits['train'] (topics.Split); the
  seed draws the head's initial weights and the order of the passages."""
  train = splits["train"]
  tokens = np.concatenate(train.documents)
  labels = np.repeat(train.labels, [len(d) for d in train.documents])
  width = jax.eval_shape(lambda p, t: family.representations(model, p, t), params, tokens[:1]).shape[-1]
  variables = {"model": params, "head": {"kernel": 0.02 * jax.random.normal(jax.random.key(seed), (width, len(names))),
                                         "bias": jnp.zeros(len(names))}}
  tx = optax.adamw(optax.warmup_cosine_decay_schedule(0.0, learning_rate, max(1, steps // 10), steps),
                   weight_decay=WEIGHT_DECAY)

  def logits(v, tokens_BL):
    pooled_BD = family.representations(model, v["model"], tokens_BL).astype(jnp.float32).mean(axis=1)
    return pooled_BD @ v["head"]["kernel"] + v["head"]["bias"]

  @jax.jit
  def step(v, state, tokens_BL, labels_B):
    loss = lambda v: optax.softmax_cross_entropy_with_integer_labels(logits(v, tokens_BL), labels_B).mean()
    grads = jax.grad(loss)(v)
    updates, state = tx.update(grads, state, v)
    return optax.apply_updates(v, updates), state

  rng = np.random.default_rng(seed)
  order = np.concatenate([rng.permutation(len(tokens)) for _ in range(steps * batch // len(tokens) + 1)])
  state = tx.init(variables)
  for i in range(steps):
    rows = order[i * batch:(i + 1) * batch]
    variables, state = step(variables, state, tokens[rows], labels[rows])
  predict = jax.jit(lambda v, t: jax.nn.log_softmax(logits(v, t)))
  return {"accuracy": _accuracy(predict, variables, splits["test"], batch),
          "validation_accuracy": _accuracy(predict, variables, splits["validation"], batch)}


def _accuracy(predict, variables, split, batch: int) -> float:
  """The share of documents whose passages' summed log-probabilities rank their class first."""
  passages = np.concatenate(split.documents)
  pad = (-len(passages)) % batch  # Whole batches: one compilation.
  padded = np.concatenate([passages, np.zeros((pad, passages.shape[1]), passages.dtype)])
  scores = np.concatenate([np.asarray(predict(variables, padded[i:i + batch]))
                           for i in range(0, len(padded), batch)])[:len(passages)]
  starts = np.cumsum([0] + [len(d) for d in split.documents])
  predicted = [scores[a:b].sum(0).argmax() for a, b in zip(starts[:-1], starts[1:])]
  return float(np.mean(np.asarray(predicted) == split.labels))
