"""Zero-shot tasks scored by the model's own likelihood: no classifier is trained, and random parameters score
chance by construction.

Four tasks, built once from the bundled corpus's downstream documents (held out of pre-training, and none with
a near-copy in train: pretrain/data/corpus.py) and shipped as versioned files (VERSION; `python
tools/zero_shot_tasks.py` builds them again and checks they are unchanged, `--leak` measures what train holds of
them). No item's correct text stands verbatim in a train document.

- minimal pairs, BLiMP's form (Warstadt et al. 2020): a text and a perturbed copy; the model is right when it
  gives the original the higher total log-probability; chance 0.5.
  - pairs_swap: one line of prose with two adjacent words swapped;
  - pairs_replace: one line of prose with a word replaced by a word of the same length next to it in frequency,
    the more or the less frequent one at random (among the MAX_RANK most frequent words of the train split);
  - pairs_lines: four lines of a paragraph with the middle two exchanged.
  A swap or an exchange keeps the text's tokens and only reorders them; a replacement keeps the length and the
  frequency class of the word. Nothing but the order and the choice of words tells the pair apart.
- cloze, LAMBADA's form (Paperno et al. 2016): a passage's last word (the end of a sentence) among CHOICES
  candidates, the others words of the same length from the same document; right when the answer's
  log-probability after the passage is the highest; chance 1 / CHOICES.

How each model scores (Objective.score_rows): a decoder-only model the log-likelihood of the text after BOS (a
prefix-LM model reads the cloze context as its prefix); an encoder-decoder the text as the span after an empty
input (the sentinel form of generate; UL2 as its S-denoiser after [S2S], MASS after one [MASK] per token), the
cloze answer after the passage; a masked LM the pseudo-log-likelihood (Salazar et al. 2020: each scored token
masked in turn); ELECTRA's discriminator the log-probability that every scored token is original. A task
with a text longer than the positions a model trained at is not scored for it, and says so.
"""

import collections
import hashlib
import importlib.resources
import json
import re
import sys

import numpy as np

VERSION = 2
TASKS = ("pairs_swap", "pairs_replace", "pairs_lines", "cloze")
# Held-out passages for a text's log-likelihood (lm-eval's loglikelihood_rolling: pretrain/downstream/harness.py).
DOCUMENTS, DOCUMENT_CHARS, MAX_DOCUMENTS = "documents", 2000, 200
CHANCE = {"pairs_swap": 0.5, "pairs_replace": 0.5, "pairs_lines": 0.5, "cloze": 0.25,
          "pairs_swap_span": 0.5, "pairs_replace_span": 0.5, "pairs_lines_span": 0.5}
CHOICES = 4
MAX_RANK = 500             # pairs_replace: both words among the train split's most frequent lowercase words
MAX_ITEMS = 400             # per task
PER_DOCUMENT = 4            # at most this many items of a task from one document
CLOZE_CONTEXT_CHARS = 300   # a cloze passage: whole lines before the answer, at most this long
_WORD = re.compile(r"(?<![A-Za-z])[a-z]{2,}(?![A-Za-z])")


def directory() -> str:
  """Where the task files of VERSION are (in the package)."""
  return str(importlib.resources.files("pretrain.downstream").joinpath(f"zero_shot_v{VERSION}"))


def document_id(text: str) -> str:
  """A document's id in the task files: the sha256 of its text, as the corpus's TFDS keys."""
  return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _prose(line: str) -> bool:
  """A line of running text: not indented (code, grammar, tables), six or more words, mostly plain words."""
  words = line.split(" ")
  return (line == line.strip() and len(words) >= 6 and len(line) <= 100
          and sum(bool(re.fullmatch(r"[A-Za-z,.;:'()\-]+", w)) for w in words) >= 0.8 * len(words))


def _paragraphs(text: str) -> list[list[str]]:
  return [block.split("\n") for block in text.split("\n\n")]


def _inner_words(line: str) -> list[tuple[int, str]]:
  """(start, word) of the lowercase words of a line with a space on each side (so that a change of them leaves
  every other token of the line as it was)."""
  return [(m.start(), m.group()) for m in _WORD.finditer(line)
          if m.start() > 0 and line[m.start() - 1] == " " and line[m.end():m.end() + 1] == " "]


def _swap(line: str, rng) -> str | None:
  spots = [(a, b) for (a, wa), (b, wb) in zip(_inner_words(line), _inner_words(line)[1:])
           if b == a + len(wa) + 1 and wa != wb]
  if not spots:
    return None
  a, b = spots[rng.integers(len(spots))]
  first, second = line[a:b - 1], line[b:b + len(_WORD.match(line, b).group())]
  return line[:a] + second + " " + first + line[b + len(second):]


def _replace(line: str, rng, rank: dict[str, int], by_length: dict[int, list[str]]) -> str | None:
  spots = [(start, word) for start, word in _inner_words(line) if rank.get(word, MAX_RANK) < MAX_RANK]
  if not spots:
    return None
  start, word = spots[rng.integers(len(spots))]
  peers = by_length[len(word)]  # The same length, most frequent first.
  i = peers.index(word)
  if not 0 < i < len(peers) - 1:  # A word at either end has one neighbour: the pair would tell by frequency.
    return None
  other = peers[i + rng.choice((-1, 1))]  # As often more frequent as less.
  return line[:start] + other + line[start + len(word):]


def _cloze(document: str, rng, rank: dict[str, int]) -> list[dict]:
  """Cloze items of a document: each sentence end 'word.' whose word is among the MAX_RANK most frequent, with
  CHOICES - 1 other such words of its length from the document."""
  words = sorted(w for w in set(_WORD.findall(document)) if rank.get(w, MAX_RANK) < MAX_RANK)
  found = []
  for m in re.finditer(r"(?<=\S )([a-z]{3,})\.(?=\s|$)", document):
    answer, start = m.group(1), m.start(1)
    if answer not in words:
      continue
    line_start = document.rfind("\n", 0, start) + 1
    context_start = line_start
    while context_start:  # Whole lines back within the paragraph, while they fit.
      previous = document.rfind("\n", 0, context_start - 1) + 1
      if not document[previous:context_start - 1].strip() or start - previous > CLOZE_CONTEXT_CHARS:
        break
      context_start = previous
    context = document[context_start:start - 1]  # Without the space: it belongs to the answer.
    others = [w for w in words if len(w) == len(answer) and w != answer]
    if len(context) < 40 or len(others) < CHOICES - 1:
      continue
    choices = [answer, *rng.choice(others, CHOICES - 1, replace=False).tolist()]
    order = rng.permutation(CHOICES)
    found.append({"context": context, "choices": [choices[k] for k in order],
                  "answer": int(np.argmax(order == 0))})
  return found


def build(downstream: list[str], train: list[str], seed: int = 0) -> dict[str, list[dict]]:
  """{task: its items} from the held-out documents (`downstream`), the word frequencies of `train`, and the
  held-out passages (DOCUMENTS); the same documents and seed give the same items. An item whose correct text
  stands verbatim in a train document (a boilerplate line, such as 'Example (for a Turtle instance named
  turtle):') is left out: a model may have learnt it by heart."""
  seen = _joined(train)
  counts = collections.Counter(w for text in train for w in _WORD.findall(text))
  ranked = [w for w, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]
  rank = {w: i for i, w in enumerate(ranked)}
  by_length = collections.defaultdict(list)
  for word in ranked[:MAX_RANK]:
    by_length[len(word)].append(word)
  tasks = {name: [] for name in TASKS}
  for text in downstream:
    rng = np.random.default_rng([seed, int(document_id(text)[:8], 16)])  # Per document: stable under edits.
    found = collections.defaultdict(list)
    for lines in _paragraphs(text):
      for line in lines:
        if _prose(line):
          for name, perturbed in (("pairs_swap", _swap(line, rng)),
                                  ("pairs_replace", _replace(line, rng, rank, by_length))):
            if perturbed:
              found[name].append({"good": line, "bad": perturbed})
      for i in range(0, len(lines) - 3, 4):
        window = lines[i:i + 4]
        if all(map(_prose, window)) and window[1] != window[2]:
          found["pairs_lines"].append({"good": "\n".join(window),
                                       "bad": "\n".join([window[0], window[2], window[1], window[3]])})
    found["cloze"] = _cloze(text, rng, rank)
    for name, items in found.items():
      items = [item for item in items if correct_text(name, item) not in seen]
      picked = rng.permutation(len(items))[:PER_DOCUMENT]
      tasks[name].extend({"document": document_id(text), **items[k]} for k in sorted(picked))
  picked = {}
  passages = [(document_id(text), text[:text.rfind("\n", 0, DOCUMENT_CHARS)] if len(text) > DOCUMENT_CHARS else text)
              for text in downstream]
  picked[DOCUMENTS] = [{"id": f"{DOCUMENTS}-{n:04d}", "document": doc, "text": passage}
                       for n, (doc, passage) in enumerate(p for p in passages[:MAX_DOCUMENTS] if p[1].strip())]
  for name, items in tasks.items():
    keep = sorted(np.random.default_rng([seed, TASKS.index(name)]).permutation(len(items))[:MAX_ITEMS])
    picked[name] = [{"id": f"{name}-{n:04d}", **items[k]} for n, k in enumerate(keep)]
  return picked


def _joined(texts: list[str]) -> str:
  """The texts as one string to look passages up in, apart by a character no text has (no match spans two)."""
  return "\0".join(texts)


def from_corpus(seed: int = 0) -> dict[str, list[dict]]:
  """The tasks built from the bundled corpus: its downstream documents, its train split's word counts."""
  from pretrain.data import corpus  # pylint: disable=g-import-not-at-top  (the data stack)
  texts = corpus.documents()
  return build([t for t in texts if corpus.split_of(t) == "downstream"],
               [t for t in texts if corpus.split_of(t) == "train"], seed)


def files(tasks: dict[str, list[dict]]) -> dict[str, bytes]:
  """{file name: contents} of the task files: a JSONL file per task and manifest.json (the version, the corpus
  they come from, each file's items and sha256)."""
  contents = {f"{name}.jsonl": "".join(json.dumps(item, sort_keys=True) + "\n" for item in items).encode()
              for name, items in tasks.items()}
  manifest = {"version": VERSION, "source": f"the bundled corpus's downstream split (CPython {_python()})",
              "tasks": {name: {"items": len(tasks[name]), "chance": CHANCE.get(name),
                               "sha256": hashlib.sha256(contents[f"{name}.jsonl"]).hexdigest()}
                        for name in tasks}}
  contents["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
  return contents


def _python() -> str:
  return f"{sys.version_info.major}.{sys.version_info.minor}"


def load(name: str, where: str | None = None) -> list[dict]:
  """The items of a task, from the package's files of VERSION (or the files in `where`)."""
  with open(f"{where or directory()}/{name}.jsonl", encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def correct_text(name: str, item: dict) -> str:
  """The text an item's right answer reads: a pair's original, a cloze passage with its answer, a passage."""
  if name == "cloze":
    return f"{item['context']} {item['choices'][item['answer']]}"
  return item["text" if name == DOCUMENTS else "good"]


def leak(where: str, texts: dict[str, list[str]]) -> dict:
  """What a model pre-trained on texts['train'] has seen of the held-out text: the share of the downstream split's
  distinct 13-word shingles (pretrain/data/overlap.py) found in train's; per held-out split its documents and how
  many have at least half and at least 80% of their shingles in train's; and per task of the files in `where`
  its items and how many have their correct text verbatim in a train document."""
  from pretrain.data import overlap  # pylint: disable=g-import-not-at-top  (data stack: not for generate)
  found = {"downstream_shingles_in_train": overlap.pooled_share(texts["downstream"], texts["train"])}
  for split in ("validation", "downstream"):
    shares = overlap.shares(texts[split], texts["train"])
    found[split] = {"documents": len(shares), "half_in_train": sum(s >= 0.5 for s in shares),
                    "80%_in_train": sum(s >= 0.8 for s in shares)}
  train = _joined(texts["train"])
  found["tasks"] = {}
  for name in (*TASKS, DOCUMENTS):
    items = load(name, where)
    found["tasks"][name] = {"items": len(items),
                            "verbatim_in_train": sum(correct_text(name, item) in train for item in items)}
  return found


def requests(name: str, items: list[dict], vocabulary) -> list[tuple[list[int], list[int]]]:
  """The (context, continuation) token ids a task's items score: a pair's two texts alone; a cloze item's
  candidates each after its passage (the space before a word is the word's, and the passage and the word are
  encoded together and split where the passage's tokens end, as lm-eval does)."""
  if name != "cloze":
    return [([], vocabulary.encode(item[side])) for item in items for side in ("good", "bad")]
  found = []
  for item in items:
    context = vocabulary.encode(item["context"])
    found.extend((context, vocabulary.encode(f"{item['context']} {choice}")[len(context):])
                 for choice in item["choices"])
  return found


def accuracy(name: str, items: list[dict], scores: list[float]) -> float:
  """The share of items the scores (in requests' order) get right; a tie counts half (chance's share)."""
  if name != "cloze":
    good, bad = np.asarray(scores[0::2]), np.asarray(scores[1::2])
    return float(np.mean((good > bad) + 0.5 * (good == bad)))
  by_item = np.asarray(scores).reshape(len(items), CHOICES)
  best = by_item.max(axis=1, keepdims=True)
  answers = np.asarray([item["answer"] for item in items])
  winners = by_item == best
  return float(np.mean(winners[np.arange(len(items)), answers] / winners.sum(axis=1)))


def accuracies(score, vocabulary, names=TASKS, limit: int | None = None) -> dict[str, float]:
  """{task: accuracy} of a scorer: score(requests) -> the log-probability of each (context, continuation); on the
  first `limit` items of each task (None: all)."""
  results = {}
  for name in names:
    items = load(name)[:limit]
    results[name] = accuracy(name, items, score(requests(name, items, vocabulary)))
  return results


PAIRS = ("pairs_swap", "pairs_replace", "pairs_lines")
SPAN = "_span"  # A pair task scored as a masked span: pairs_swap_span, ...


def spans(item: dict) -> list[tuple[str, str, str]]:
  """A minimal pair's two texts, each as (before, the part where the two differ, after), cut at white space so
  that the part is whole words: the swapped words, the replaced word, the exchanged lines."""
  good, bad = item["good"], item["bad"]
  start = next((i for i, (a, b) in enumerate(zip(good, bad)) if a != b), min(len(good), len(bad)))
  end = next((i for i, (a, b) in enumerate(zip(reversed(good), reversed(bad))) if a != b), 0)
  end = min(end, len(good) - start, len(bad) - start)
  cut = lambda text, i: max(text.rfind(" ", 0, i), text.rfind("\n", 0, i)) + 1
  start = min(cut(good, start), cut(bad, start))
  after = lambda text, j: min((k for k in (text.find(" ", j), text.find("\n", j)) if k >= 0), default=len(text))
  parts = []
  for text in (good, bad):
    stop = after(text, len(text) - end)
    parts.append((text[:start].rstrip(), text[start:stop].strip(), text[stop:].lstrip()))
  return parts


def span_accuracies(score, vocabulary, names=PAIRS, limit: int | None = None) -> dict[str, float]:
  """{task + SPAN: accuracy} of the pair tasks scored as a masked span (each text's differing part given the
  rest, the native form of a model trained to fill spans): score(requests) -> the log-probability of each
  (prefix, span, suffix) of token ids; on the first `limit` items of each task (None: all)."""
  results = {}
  for name in names:
    items = load(name)[:limit]
    requests = [tuple(vocabulary.encode(part) if part else [] for part in parts)
                for item in items for parts in spans(item)]
    results[name + SPAN] = accuracy(name, items, score(requests))
  return results


def evaluate(run, params, names=TASKS, scorer=None, limit: int | None = None
             ) -> tuple[dict[str, float], dict[str, str]]:
  """({task: accuracy} of a run's model with `params` on the zero-shot tasks, {task: why it is not scored}), on
  the first `limit` items of each (None: all; lm-eval's --limit) (`scorer`: a likelihood.Scorer of the run, to
  reuse its compiled steps for other parameters of the model). A task with a text longer than the model trained
  at is not scored (likelihood.TooLong): its scores there would not be the model's."""
  from pretrain.downstream import likelihood  # pylint: disable=g-import-not-at-top  (JAX: only when scoring)
  scorer = scorer or likelihood.Scorer(run)
  objective, lengths = run.objective, run.task_lengths
  forms = [(accuracies, scorer, names, "")]  # (measure, its scorer, its tasks, the suffix of their names)
  if objective.span_rows([], [1], [], run.vocabulary, lengths) is not None:  # It fills masked spans: score so too.
    spanned = likelihood.Scorer(run, rows=lambda *parts: objective.span_rows(*parts, run.vocabulary, lengths))
    forms.append((span_accuracies, spanned, [name for name in PAIRS if name in names], SPAN))
  found, not_scored = {}, {}
  for measure, form_scorer, tasks, suffix in forms:
    for name in tasks:
      try:
        found.update(measure(lambda requests, s=form_scorer: [logprob for logprob, _ in s(params, requests)],
                             run.vocabulary, [name], limit))
      except likelihood.TooLong as e:
        not_scored[name + suffix] = e.problem
  return found, not_scored
