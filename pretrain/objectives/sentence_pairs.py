"""BERT's next-sentence prediction (NSP) and ALBERT's sentence-order prediction
(SOP): MLM examples of two segments and a label saying whether the second
continues the first.

Sentences end after a token whose piece ends in '.', '!' or '?' (closing quotes
and brackets after it aside) where whitespace or the end of the text follows
(common.SentenceEnds: 'io.BytesIO' and '(e.g.' end none). As BERT's
create_pretraining_data: each document's consecutive sentences are gathered
into chunks of about the example's length (10% of documents, short_seq_prob,
aim shorter); a chunk of two sentences or more is split at a random sentence
boundary into A and B. Half the pairs are positives (label 1: B follows A in
the document); the other half are negatives (label 0): for NSP, B is replaced
by consecutive sentences from a random place in another document of the group;
for SOP, A and B swap places. A chunk of one sentence is a negative with B
from another document, for both. The longer segment is then cut at its end
until the pair fits. The example is `A EOS B EOS`, MLM-masked except at the
two separators. The model is the encoder with a pair head (SentencePairs).
"""

import hashlib
import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from pretrain import config, families, models, vocab
from pretrain.families import bits_per_byte, ratio, totals_ratio
from pretrain.objectives import common, mlm
from pretrain.objectives.spec import Objective, Setting
from pretrain.system import tf_loader
from pretrain.system.errors import UserError
from pretrain.train import losses

tf = tf_loader.Lazy("tensorflow")

KINDS = ("nsp", "sop")


def _check_kind(kind: str) -> None:
  if kind not in KINDS:
    raise UserError(f"sentence pairs are built for data.objective nsp or sop, got {kind!r}; use one of those")


def sentences(tokens: np.ndarray, ends: common.SentenceEnds, max_tokens: int) -> list[np.ndarray]:
  """The consecutive sentences of `tokens`, a longer one than `max_tokens` cut into pieces of at most that many."""
  cuts = ends.after(tokens)
  result = []
  for sentence in np.split(tokens, cuts[cuts < len(tokens)]):
    result.extend(sentence[i:i + max_tokens] for i in range(0, len(sentence), max_tokens))
  return result


def _truncate(a: np.ndarray, b: np.ndarray, budget: int) -> tuple[np.ndarray, np.ndarray]:
  """Cuts the longer segment at its end until the two fit `budget` (BERT's truncate_seq_pair, always from the
  end)."""
  while len(a) + len(b) > budget:
    if len(a) > len(b):
      a = a[:-1]
    else:
      b = b[:-1]
  return a, b


def _span(document_sentences: list[np.ndarray], tokens: int) -> np.ndarray:
  """The first sentences, as many as reach `tokens` tokens (or all; at least one)."""
  taken, size = [], 0
  for sentence in document_sentences:
    taken.append(sentence)
    size += len(sentence)
    if size >= tokens:
      break
  return np.concatenate(taken)


class Pair(NamedTuple):
  a: np.ndarray
  b: np.ndarray
  label: int          # 1: B continues A in its document
  random_next: bool   # A's chunk held one sentence, so B came from another document (BERT's rule)


def build_pairs(documents: list[np.ndarray], kind: str, length: int, ends: common.SentenceEnds,
                rng: np.random.Generator, short_seq_prob: float = 0.0) -> list[Pair]:
  """Pairs from tokenized documents, len(A) + len(B) + 2 <= `length` (room for two separators), as BERT's and
  ALBERT's create_instances_from_document.

  Each document aims at the whole budget, or with probability `short_seq_prob` at a uniform length in [2, budget]
  (so that short inputs are not out of distribution later). Its consecutive sentences gather into a chunk until
  they reach that length or the document ends. A chunk of two sentences or more splits at a uniform sentence
  boundary into A and B; in half the pairs B is replaced by sentences from a random place in another document
  (NSP) or A and B swap places (SOP), label 0. A chunk of one sentence (a document of one sentence, a document's
  last sentence left alone, a sentence as long as the budget) is A entire, B from another document, label 0, for
  both kinds, as BERT and ALBERT do. With no other document holding a sentence there is nothing to draw B from:
  NSP's pairs then stay positive and a one-sentence chunk gives none.
  """
  _check_kind(kind)
  budget = length - 2
  split = [sentences(d, ends, budget // 2) for d in documents]
  with_sentences = [j for j, document in enumerate(split) if document]

  def elsewhere(position: int, tokens: int) -> np.ndarray:
    """Sentences from a random place of a random other document, as many as reach `tokens`."""
    k = rng.integers(len(with_sentences) - 1)
    other = split[with_sentences[k + (k >= position)]]
    return _span(other[rng.integers(len(other)):], tokens)

  pairs = []
  for position, index in enumerate(with_sentences):
    document = split[index]
    target = int(rng.integers(2, budget + 1)) if rng.random() < short_seq_prob else budget
    chunk, size = [], 0
    for i, sentence in enumerate(document):
      chunk.append(sentence)
      size += len(sentence)
      if size < target and i < len(document) - 1:
        continue
      if len(chunk) >= 2:
        a_end = rng.integers(1, len(chunk))
        pair = Pair(np.concatenate(chunk[:a_end]), np.concatenate(chunk[a_end:]), 1, False)
        if rng.random() < 0.5:
          if kind == "sop":
            pair = Pair(pair.b, pair.a, 0, False)
          elif len(with_sentences) > 1:
            pair = Pair(pair.a, elsewhere(position, target - len(pair.a)), 0, False)
      elif len(with_sentences) > 1:
        pair = Pair(chunk[0], elsewhere(position, target - len(chunk[0])), 0, True)
      else:
        pair = None
      if pair is not None:
        pairs.append(Pair(*_truncate(pair.a, pair.b, budget), pair.label, pair.random_next))
      chunk, size = [], 0
  return pairs


def _group_pairs(group: np.ndarray, seed: int, kind: str, length: int, ends: common.SentenceEnds,
                 short_seq_prob: float):
  """build_pairs of a padded batch of documents as flat arrays for tf.numpy_function: A's tokens and lengths,
  B's tokens and lengths, the labels. The draws depend on the seed and the documents only."""
  group = group.astype(np.int32)
  digest = hashlib.sha256(np.int64(seed).tobytes() + np.array(group.shape, np.int64).tobytes() + group.tobytes())
  rng = np.random.default_rng(int.from_bytes(digest.digest()[:16], "little"))
  pairs = build_pairs([row[row != 0] for row in group], kind, length, ends, rng, short_seq_prob)

  def flat(segments):
    return np.concatenate([np.zeros([0], np.int32), *segments]).astype(np.int32)

  def lengths(segments):
    return np.array([len(s) for s in segments], np.int64)

  a, b = [p.a for p in pairs], [p.b for p in pairs]
  return flat(a), lengths(a), flat(b), lengths(b), np.array([p.label for p in pairs], np.int32)


def check_length(length: int) -> int:
  if length < 4:
    raise UserError(f"inputs_length={length} is too short for sentence pairs; give at least 4 (two tokens and "
                    "two separators), a few hundred in practice")
  return length


def sentence_pairs(dataset, sequence_length, output_features, *, seed: int, kind: str, rate: float = 0.15,
                   short_seq_prob: float = 0.0):
  """seqio preprocessor: documents of 'targets' tokens -> {'inputs', 'targets', 'weights', 'pair_label'}, pairs
  of segments of at most the inputs length drawn within groups of 128 documents."""
  _check_kind(kind)
  vocabulary = output_features["targets"].vocabulary
  length = check_length(sequence_length["inputs"])
  ends = common.sentence_ends(vocabulary)
  mask_id = vocab.single_piece_id(vocabulary, mlm.MASK_TOKEN)
  random_ids = (vocab.first_regular_id(vocabulary), vocabulary.vocab_size - vocabulary.extra_ids)
  eos = vocabulary.eos_id

  def to_pairs(group):
    out = tf.numpy_function(lambda g: _group_pairs(g, seed, kind, length, ends, short_seq_prob), [group["targets"]],
                            [tf.int32, tf.int64, tf.int32, tf.int64, tf.int32], stateful=False)
    for tensor in out:
      tensor.set_shape([None])
    a, a_lengths, b, b_lengths, labels = out
    return tf.data.Dataset.from_tensor_slices({"a": tf.RaggedTensor.from_row_lengths(a, a_lengths),
                                               "b": tf.RaggedTensor.from_row_lengths(b, b_lengths),
                                               "label": labels})

  def make(pair):
    targets = tf.concat([pair["a"], [eos], pair["b"], [eos]], 0)
    positions = tf.range(tf.size(targets))
    candidates = (positions != tf.size(pair["a"])) & (positions != tf.size(targets) - 1)
    example = mlm.mask_tokens(targets, common.example_seed(targets, seed), rate=rate, mask_id=mask_id,
                              random_ids=random_ids, candidates=candidates)
    for name in ("inputs", "targets", "weights"):
      example[name].set_shape([None])
    example["pair_label"] = tf.reshape(pair["label"], [1])
    return example

  dataset = dataset.map(lambda ex: {"targets": ex["targets"]})
  # The groups of common.concatenate. Padding is id 0, which no text token has.
  dataset = dataset.padded_batch(128, padded_shapes={"targets": [-1]}).flat_map(to_pairs)
  return dataset.map(make, num_parallel_calls=tf.data.AUTOTUNE)


def check_documents(token_documents, ends: common.SentenceEnds, kind: str) -> None:
  """Raises a UserError unless at least half the documents hold two sentences: a source of one-sentence
  documents gives no positive pair, and where a few seem to hold two, an abbreviation's dot ('mr.', 'inc.', as in
  Penn Treebank's one-sentence lines) is the likelier cause."""
  token_documents = list(token_documents)
  pairs = sum(len(sentences(np.asarray(d), ends, max(len(d), 1))) >= 2 for d in token_documents)
  if 2 * pairs < len(token_documents) or not pairs:
    found = (f"none of the first {len(token_documents)} documents of the source holds two sentences (ending in . "
             "! or ?)" if not pairs else f"only {pairs} of the first {len(token_documents)} documents of the source "
             "hold two sentences (ending in . ! or ?), fewer than half, and an abbreviation's dot ('mr.', 'inc.') "
             "counts as an end")
    raise UserError(f"data.objective={kind} builds sentence pairs, but {found}; use a source of multi-sentence "
                    "documents, or data.objective=mlm")


def check_source(source, vocabulary, kind: str, documents: int = 200) -> None:
  """check_documents on the first `documents` training documents of a source (pretrain.data.sources.Source)."""
  texts = itertools.islice(source.texts("train"), documents)
  check_documents([np.asarray(vocabulary.encode(t), np.int32) for t in texts], common.sentence_ends(vocabulary), kind)


class SentencePairs(families.EncoderOnly):
  """The encoder with a sentence-pair head (models.PairEncoder), trained on MLM and, jointly, on whether the
  second segment of a pair continues the first: next-sentence (NSP) or sentence-order (SOP) prediction. A pair
  is one padded row, its label the feature `pair_label`."""
  architecture = "encoder-only with a pair head"
  mixes = False
  task_features = ("inputs", "targets", "weights", "pair_label")
  label_features = ("pair_label",)

  def __init__(self, name: str):
    self.name = name

  def task_lengths(self, data_cfg):
    return {**dict.fromkeys(("inputs", "targets", "weights"), data_cfg.seq_len), "pair_label": 1}

  def converter(self):
    # pylint: disable-next=g-import-not-at-top  (data stack: not for generate)
    from pretrain.data.encoder_converter import PairFeatureConverter
    return PairFeatureConverter()

  def model_lengths(self, task_lengths):
    return {**dict.fromkeys(families.ENCODER_FEATURES, task_lengths["inputs"]), "encoder_pair_labels": 1}

  def random_batch(self, rows, task_lengths, vocab_size):
    batch = super().random_batch(rows, task_lengths, vocab_size)
    batch["encoder_pair_labels"] = np.random.default_rng(0).integers(0, 2, (rows, 1)).astype(np.int32)
    return batch

  def build(self, model_cfg, vocabulary_size):
    return models.PairEncoder(models.DecoderOnlyConfig.from_config(*models.resolve(model_cfg, vocabulary_size)))

  def representations(self, model, params, tokens_BL):
    _, state = model.apply({"params": params}, tokens_BL,
                           capture_intermediates=lambda module, method: module.name == "final_norm")
    return state["intermediates"]["encoder"]["final_norm"]["__call__"][0]

  def token_logits(self, model, params, batch):
    return self.forward(model, params, batch)[0][0]  # The masked-token head's, not the pair head's.

  def loss_sums(self, model, params, batch, loss_cfg, rng=None):
    """MLM's token sums plus the pair head's: its cross-entropy's mean over the pairs enters the loss times the
    masked tokens (the weight), so the step optimises MLM's mean plus the pair loss's mean, as BERT."""
    (logits_BLV, pair_logits_B2), moe_values = self.forward(model, params, batch, rng)
    sums = losses.with_moe(losses.loss_sums(logits_BLV, batch["encoder_target_tokens"],
                                            batch["encoder_loss_weights"], loss_cfg.z_loss, loss_cfg.label_smoothing),
                           moe_values, loss_cfg)
    labels_B = batch["encoder_pair_labels"][:, 0]
    rows_B = jnp.any(batch["encoder_segment_ids"] > 0, axis=-1).astype(jnp.float32)  # not padding rows
    log_p_B2 = jax.nn.log_softmax(pair_logits_B2)
    pair_loss_B = -jnp.take_along_axis(log_p_B2, labels_B[:, None], axis=-1)[:, 0]
    sums.update(pair_loss=jnp.sum(pair_loss_B * rows_B), pairs=jnp.sum(rows_B),
                pair_correct=jnp.sum((jnp.argmax(pair_logits_B2, -1) == labels_B) * rows_B))
    # Times at least 1: a batch without masked tokens still trains the pair head.
    sums["loss"] += ratio(sums["pair_loss"], sums["pairs"]) * jnp.maximum(sums["weight"], 1.0)
    return sums

  def train_metrics(self, sums):
    return {"loss": ratio(sums["loss"], sums["weight"]), "mlm_loss": ratio(sums["cross_entropy"], sums["weight"]),
            "mlm_accuracy": ratio(sums["correct"], sums["weight"]), "z_loss": ratio(sums["z_loss"], sums["weight"]),
            "pair_loss": ratio(sums["pair_loss"], sums["pairs"]),
            "pair_accuracy": ratio(sums["pair_correct"], sums["pairs"]),
            **losses.moe_metrics(sums, ratio, per_layer=False)}

  def eval_metrics(self, totals):
    mlm_loss, pair = (totals_ratio(totals["cross_entropy"], totals["weight"]),
                      totals_ratio(totals["pair_loss"], totals["pairs"]))
    return {"loss": mlm_loss + pair, "mlm_loss": mlm_loss,
            "mlm_accuracy": totals_ratio(totals["correct"], totals["weight"]),
            "pair_loss": pair, "pair_accuracy": totals_ratio(totals["pair_correct"], totals["pairs"]),
            **bits_per_byte(totals), **losses.moe_metrics(totals, totals_ratio, per_layer=True)}  # MLM's bits

class NSP(Objective):
  """BERT's next-sentence prediction, jointly with MLM."""
  name, family, pieces = "nsp", SentencePairs("encoder-only NSP"), (mlm.MASK_TOKEN,)
  settings = {**mlm.SETTINGS, "data.short_seq_prob": Setting(0.1, config.FRACTION, "share of documents whose pairs "
                                                                                 "aim at a uniform shorter length "
                                                                                 "(BERT's short_seq_prob)")}

  @classmethod
  def check(cls, cfg):
    length = check_length(cls.family.task_lengths(cfg.data)["inputs"])
    mlm.check_masked(length - 2, cfg.data.mlm_rate, f"a pair of data.seq_len={length} (two separators)")

  def preprocess(self, dataset, sequence_length, output_features):
    return sentence_pairs(dataset, sequence_length, output_features, seed=self.seed, kind=self.name,
                          rate=self.data.mlm_rate, short_seq_prob=self.data.short_seq_prob)

  def check_source(self, source, vocabulary):
    check_source(source, vocabulary, self.name)


class SOP(NSP):
  """ALBERT's sentence-order prediction, jointly with MLM."""
  name, family = "sop", SentencePairs("encoder-only SOP")
