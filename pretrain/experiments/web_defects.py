"""A quality ladder's defective rung: clean documents with the defects of web text put in at set rates, each
document labelled with its defect ('clean' for none), so that filters can be scored against the labels.

Defects that change a document in place: navigation and boilerplate lines around it, a paragraph repeated
several times, mojibake (typographic quotes and dashes, as a web page has them, encoded as UTF-8 and read back
as Windows-1252). Defects that add documents: exact and near copies of documents, keyword spam, truncated
fragments, and text sampled from a word trigram model of the corpus (fluent locally, meaningless overall).
Everything is drawn from one seeded generator: the same documents and seed give the same mix.
"""

import collections
import random

# Share of the clean documents that each defect changes (in place) or adds (new documents). A web crawl is
# mostly such text (C4 kept about a tenth of Common Crawl's pages); here about two thirds of the mix is.
IN_PLACE = {"boilerplate": 0.3, "repeated_paragraphs": 0.1, "mojibake": 0.1}
ADDED = {"duplicate": 0.3, "near_duplicate": 0.2, "spam": 0.3, "fragment": 0.3, "generated": 0.3}
DEFECTS = (*IN_PLACE, *ADDED)

NAVIGATION = (
    "Home | Docs | Blog | Contact", "Skip to main content", "Menu", "Sign in", "Search this site",
    "Subscribe to our newsletter!", "(c) 2024 Example Inc. All rights reserved.",
    "Privacy Policy | Terms of Use | Cookie Policy", "This site uses cookies to improve your experience.",
    "Accept all cookies", "Share: Facebook Twitter LinkedIn", "Posted in Uncategorized", "Read more...",
    "Related posts:", "Leave a comment", "Previous | Next", "Back to top", "Tags: python, docs, tutorial",
)
SPAM_WORDS = ("python", "download", "free", "best", "tutorial", "cheap", "online", "course", "now", "top",
              "learn", "fast", "easy", "2024", "guide", "click", "here", "deal")
_TYPOGRAPHIC = {"'": "\u2019", '"': "\u201d", " - ": " \u2013 ", "...": "\u2026"}


def _boilerplate(text: str, rng: random.Random) -> str:
  lines = rng.sample(NAVIGATION, rng.randint(4, 8))
  cut = rng.randint(1, len(lines) - 1)
  return "\n".join([*lines[:cut], text, *lines[cut:]])


def _repeated_paragraphs(text: str, rng: random.Random) -> str:
  paragraphs = text.split("\n\n")
  repeated = rng.choice(paragraphs)
  return "\n\n".join(paragraphs + [repeated] * rng.randint(3, 6))


def _mojibake(text: str, rng: random.Random) -> str:
  del rng
  for plain, typographic in _TYPOGRAPHIC.items():
    text = text.replace(plain, typographic)
  return text.encode("utf-8").decode("cp1252", errors="replace")


def _near_duplicate(text: str, rng: random.Random) -> str:
  words = text.split(" ")
  for i in rng.sample(range(len(words)), max(1, len(words) // 50)):  # About 2% of the words changed.
    words[i] = rng.choice(("the", "a", "this", "that", "it"))
  return " ".join(words)


def _spam(rng: random.Random) -> str:
  keywords = rng.sample(SPAM_WORDS, 6)
  words = [rng.choice(keywords) for _ in range(rng.randint(60, 200))]
  return " ".join(w + ("," if rng.random() < 0.1 else "") for w in words)


def _fragment(text: str, rng: random.Random) -> str:
  words = text.split()
  start = rng.randrange(max(1, len(words) - 5))
  return " ".join(words[start:start + rng.randint(5, 30)])


class TrigramModel:
  """Words of the documents, and what follows each pair of words."""

  def __init__(self, documents: list[str]):
    self.following = collections.defaultdict(list)
    self.starts = []
    for text in documents:
      words = text.split()
      if len(words) >= 3:
        self.starts.append((words[0], words[1]))
      for a, b, c in zip(words, words[1:], words[2:]):
        self.following[(a, b)].append(c)

  def sample(self, rng: random.Random, length: int) -> str:
    words = list(rng.choice(self.starts))
    while len(words) < length:
      options = self.following.get((words[-2], words[-1]))
      words.extend([rng.choice(options)] if options else rng.choice(self.starts))
    return " ".join(words)


def inject(documents: list[str], seed: int = 0) -> list[tuple[str, str]]:
  """(text, label) of the defective mix of `documents`: each changed or added at the rates of IN_PLACE and
  ADDED, in a shuffled order (copies after their source)."""
  rng = random.Random(seed)
  n = len(documents)
  labels = ["clean"] * n
  for defect, share in IN_PLACE.items():  # Distinct documents for each, among those the defect changes.
    eligible = [i for i in range(n) if labels[i] == "clean" and (defect != "mojibake" or _mojibake(documents[i], rng)
                                                                 != documents[i])]
    for i in rng.sample(eligible, min(len(eligible), round(share * n))):
      labels[i] = defect
  change = {"boilerplate": _boilerplate, "repeated_paragraphs": _repeated_paragraphs, "mojibake": _mojibake}
  mix = [(change[label](text, rng) if label != "clean" else text, label) for text, label in zip(documents, labels)]
  copies = []  # (index of the source in `mix`, text, label): placed after their source below.
  trigrams = TrigramModel(documents)
  for defect, share in ADDED.items():
    for _ in range(round(share * n)):
      i = rng.randrange(n)
      source = documents[i]
      text = {"duplicate": lambda: source, "near_duplicate": lambda: _near_duplicate(source, rng),
              "spam": lambda: _spam(rng), "fragment": lambda: _fragment(source, rng),
              "generated": lambda: trigrams.sample(rng, rng.randint(80, 250))}[defect]()
      if defect in ("duplicate", "near_duplicate"):
        copies.append((i, text, defect))
      else:
        mix.append((text, defect))
  # A shuffled order in which every copy comes after the document it copies: deduplication keeps the first of
  # a set, so the labels say which one a correct deduplication removes.
  keys = [rng.random() for _ in mix]
  keyed = list(zip(keys, mix)) + [(keys[i] + (1 - keys[i]) * rng.random(), (text, defect))
                                   for i, text, defect in copies]
  return [item for _, item in sorted(keyed, key=lambda pair: pair[0])]
