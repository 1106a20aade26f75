"""Document-quality filters: published heuristics that keep or drop whole documents.

Every rule is a pure function of a document's text and a few thresholds, and decides for the document as a
whole (the sources sometimes drop single lines instead; the rule's doc says so):
- Gopher: Rae et al. 2021, "Scaling Language Models: Methods, Analysis & Insights from Training Gopher",
  appendix A (the MassiveText quality filter and repetition removal), with their thresholds as defaults.
- C4: Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
  Transformer", section 2.2.
- pretrain: ours.

A spec such as 'gopher,c4', 'words=20:1000,stop_words' or 'my_rules.py:no_urls' selects them (see `parse`).
Plain Python only, so that importing this module stays fast.
"""

import collections
import dataclasses
import difflib
import functools
import importlib
import os
import re
import string
from typing import Callable

from pretrain.system.errors import UserError


class Document:
  """A document's text with its splits, each computed once however many rules read it."""

  def __init__(self, text: str):
    self.text = text

  @functools.cached_property
  def lines(self) -> list[str]:
    """The non-empty lines, stripped."""
    return [line.strip() for line in self.text.splitlines() if line.strip()]

  @functools.cached_property
  def paragraphs(self) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", self.text) if p.strip()]

  @functools.cached_property
  def words(self) -> list[str]:
    return self.text.split()

  @functools.cached_property
  def bare_words(self) -> list[str]:
    """Words lower-cased without the punctuation around them, for stop words and n-grams."""
    return [b for b in (w.strip(string.punctuation + "“”‘’«»").lower() for w in self.words) if b]


def _share(count: int, total: int) -> float:
  return count / total if total else 0.0


def _words(doc, t):
  return not t[0] <= len(doc.words) <= t[1]


def _mean_word_length(doc, t):
  return not t[0] <= _share(sum(map(len, doc.words)), len(doc.words)) <= t[1]


def _symbol_ratio(doc, t):
  # Gopher: "for either the hash symbol or the ellipsis".
  hashes, ellipses = doc.text.count("#"), doc.text.count("...") + doc.text.count("…")
  return max(_share(hashes, len(doc.words)), _share(ellipses, len(doc.words))) > t[0]


_BULLETS = ("•", "‣", "◦", "⁃", "·", "●", "○", "▪", "■", "□", "►", "▸", "-", "*")  # Not dashes: dialogue.


def _bullet_lines(doc, t):
  return _share(sum(line.startswith(_BULLETS) for line in doc.lines), len(doc.lines)) > t[0]


def _ellipsis_lines(doc, t):
  return _share(sum(line.endswith(("...", "…")) for line in doc.lines), len(doc.lines)) > t[0]


def _alphabetic_words(doc, t):
  return _share(sum(any(c.isalpha() for c in w) for w in doc.words), len(doc.words)) < t[0]


_STOP_WORDS = frozenset(["the", "be", "to", "of", "and", "that", "have", "with"])


def _stop_words(doc, t):
  return sum(w in _STOP_WORDS for w in doc.bare_words) < t[0]


def _duplicates(parts: list[str]) -> tuple[float, float]:
  """The shares of `parts`, and of their characters, that repeat an earlier part."""
  seen, repeats, repeated_chars = set(), 0, 0
  for part in parts:
    if part in seen:
      repeats, repeated_chars = repeats + 1, repeated_chars + len(part)
    seen.add(part)
  return _share(repeats, len(parts)), _share(repeated_chars, sum(map(len, parts)))


def _duplicate_lines(doc, t):
  return _duplicates(doc.lines)[0] > t[0]


def _duplicate_paragraphs(doc, t):
  return _duplicates(doc.paragraphs)[0] > t[0]


def _duplicate_line_chars(doc, t):
  return _duplicates(doc.lines)[1] > t[0]


def _duplicate_paragraph_chars(doc, t):
  return _duplicates(doc.paragraphs)[1] > t[0]


def _ngrams(words: list[str], n: int) -> list[tuple[str, ...]]:
  return list(zip(*(words[i:] for i in range(n))))


def _top_ngrams(doc, t):
  """For n = 2, 3, 4: the characters of every occurrence of the most frequent n-gram, over all word
  characters (an n-gram seen once is no repetition, so it never counts)."""
  total = sum(map(len, doc.bare_words))
  for n, most in zip((2, 3, 4), t):
    counts = collections.Counter(_ngrams(doc.bare_words, n))
    if counts:
      (top, count), = counts.most_common(1)
      if count > 1 and _share(count * sum(map(len, top)), total) > most:
        return True
  return False


def _duplicate_ngrams(doc, t):
  """For n = 5..10: the characters of the words inside any occurrence of an n-gram seen more than once
  (each word counted once), over all word characters."""
  words = doc.bare_words
  total = sum(map(len, words))
  for n, most in zip(range(5, 11), t):
    grams = _ngrams(words, n)
    counts = collections.Counter(grams)
    covered = set()
    for start, gram in enumerate(grams):
      if counts[gram] > 1:
        covered.update(range(start, start + n))
    if _share(sum(len(words[i]) for i in covered), total) > most:
      return True
  return False


_SENTENCE_END = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s|$)")


def _sentences(doc, t):
  """A sentence ends in '.', '!' or '?' (closing quotes or brackets may follow) before whitespace or the
  end; C4 counts them with a sentence tokenizer."""
  return len(_SENTENCE_END.findall(doc.text)) < t[0]


def _lorem_ipsum(doc, t):
  return "lorem ipsum" in doc.text.lower()


def _curly_braces(doc, t):
  return "{" in doc.text


_BOILERPLATE = ("javascript", "terms of use", "privacy policy", "cookie policy", "uses cookies",
                "use of cookies", "use cookies")


def _boilerplate(doc, t):
  """C4 drops each line that names javascript or a policy notice; dropping the document when more than a
  share of its lines do (0.1 by default) is ours."""
  lines = [line.lower() for line in doc.lines]
  return _share(sum(any(p in line for p in _BOILERPLATE) for line in lines), len(lines)) > t[0]


def _terminal_punctuation(doc, t):
  """C4 keeps only the lines that end in terminal punctuation; dropping the document when fewer than a share
  of its lines do (0.5 by default) is ours."""
  ends = (".", "!", "?", '"', "'", "”", "’")
  return _share(sum(line.endswith(ends) for line in doc.lines), len(doc.lines)) < t[0]


# UTF-8 read as Latin-1 or cp1252: a lead byte as 'Ã', 'Â' or 'â', then continuation bytes as symbols.
_MOJIBAKE = re.compile("[ÃÂâ][\x80-\xbf€‚ƒ„…†‡ˆ‰Š‹ŒŽ‘’“”•–—˜™š›œžŸ]{1,2}")


def _encoding_errors(doc, t):
  bad = doc.text.count("\ufffd") + sum(len(m) for m in _MOJIBAKE.findall(doc.text))
  return _share(bad, len(doc.text)) > t[0]


@dataclasses.dataclass(frozen=True)
class Rule:
  name: str
  removes: Callable[[Document, tuple[float, ...]], bool]  # True: the document fails the rule.
  defaults: tuple[float, ...]  # The published thresholds (empty for rules with none).
  valid: Callable[[tuple], bool]
  what: str  # The valid thresholds, for the error.
  origin: str  # "C4", "Gopher" or "pretrain".


def _fractions(t):
  return all(0 <= v <= 1 for v in t)


def _min_max(t):
  return 0 <= t[0] <= t[1]


def _not_negative(t):
  return all(v >= 0 for v in t)


_FRACTION, _MIN_MAX, _NOT_NEGATIVE = "a fraction 0 <= x <= 1", "two numbers 0 <= min <= max", "a number >= 0"
RULES = {rule.name: rule for rule in [
    Rule("words", _words, (50, 100_000), _min_max, _MIN_MAX, "Gopher"),
    Rule("mean_word_length", _mean_word_length, (3, 10), _min_max, _MIN_MAX, "Gopher"),
    Rule("symbol_ratio", _symbol_ratio, (0.1,), _not_negative, _NOT_NEGATIVE, "Gopher"),
    Rule("bullet_lines", _bullet_lines, (0.9,), _fractions, _FRACTION, "Gopher"),
    Rule("ellipsis_lines", _ellipsis_lines, (0.3,), _fractions, _FRACTION, "Gopher"),
    Rule("alphabetic_words", _alphabetic_words, (0.8,), _fractions, _FRACTION, "Gopher"),
    Rule("stop_words", _stop_words, (2,), _not_negative, _NOT_NEGATIVE, "Gopher"),
    Rule("duplicate_lines", _duplicate_lines, (0.3,), _fractions, _FRACTION, "Gopher"),
    Rule("duplicate_paragraphs", _duplicate_paragraphs, (0.3,), _fractions, _FRACTION, "Gopher"),
    Rule("duplicate_line_chars", _duplicate_line_chars, (0.2,), _fractions, _FRACTION, "Gopher"),
    Rule("duplicate_paragraph_chars", _duplicate_paragraph_chars, (0.2,), _fractions, _FRACTION, "Gopher"),
    Rule("top_ngrams", _top_ngrams, (0.20, 0.18, 0.16), _fractions,
         "three fractions 0 <= x <= 1 (n = 2, 3, 4)", "Gopher"),
    Rule("duplicate_ngrams", _duplicate_ngrams, (0.15, 0.14, 0.13, 0.12, 0.11, 0.10), _fractions,
         "six fractions 0 <= x <= 1 (n = 5..10)", "Gopher"),
    Rule("sentences", _sentences, (3,), _not_negative, _NOT_NEGATIVE, "C4"),
    Rule("lorem_ipsum", _lorem_ipsum, (), lambda t: True, "no thresholds", "C4"),
    Rule("curly_braces", _curly_braces, (), lambda t: True, "no thresholds", "C4"),
    Rule("boilerplate", _boilerplate, (0.1,), _fractions, _FRACTION, "C4"),
    Rule("terminal_punctuation", _terminal_punctuation, (0.5,), _fractions, _FRACTION, "C4"),
    Rule("encoding_errors", _encoding_errors, (0.01,), _fractions, _FRACTION, "pretrain"),
]}
PRESETS = {origin.lower(): [r.name for r in RULES.values() if r.origin == origin] for origin in ("Gopher", "C4")}


@dataclasses.dataclass(frozen=True)
class Filter:
  name: str  # The rule's name, or for a user rule 'path.py:function' or 'module:function'.
  thresholds: tuple[float, ...]
  removes: Callable[[str], bool]  # Bound to the thresholds.
  # The same decision on a Document, whose splits `first_failing` shares among the filters.
  removes_document: Callable[[Document], bool] | None = dataclasses.field(default=None, repr=False)


def _rule_filter(rule: Rule, thresholds: tuple[float, ...]) -> Filter:
  def judge(doc: Document) -> bool:
    return rule.removes(doc, thresholds)
  return Filter(rule.name, thresholds, lambda text: judge(Document(text)), judge)


def _error(message: str) -> UserError:
  return UserError(f"data.filters: {message}")


def _thresholds(item: str, rule: Rule, values: str) -> tuple[float, ...]:
  example = f"{rule.name}={':'.join(f'{d:g}' for d in rule.defaults)}" if rule.defaults else rule.name
  if not rule.defaults:
    raise _error(f"{item!r}: {rule.name} takes no thresholds; write {example}")
  try:
    thresholds = tuple(float(v) for v in values.split(":"))
  except ValueError:
    raise _error(f"{item!r}: thresholds must be numbers separated by ':', e.g. {example}") from None
  if len(thresholds) != len(rule.defaults):
    raise _error(f"{item!r}: {rule.name} takes {rule.what}, got {len(thresholds)}; e.g. {example}")
  if not rule.valid(thresholds):
    raise _error(f"{item!r}: thresholds out of range; {rule.name} takes {rule.what}, e.g. {example}")
  return thresholds


def _user_filter(item: str, target: str, function: str) -> Filter:
  """A user's function of the text that returns True to KEEP the document, like a filter predicate."""
  if target.endswith(".py") or os.sep in target or "/" in target:
    if not os.path.isfile(target):
      raise _error(f"{item!r}: no file {target!r}; give the path of a Python file that defines {function}(text)")
    from pretrain import config  # pylint: disable=import-outside-toplevel  (it imports ml_collections)
    try:
      module = config.load_module(target, f"_pretrain_filter_{os.path.basename(target)[:-3]}")
    except UserError as e:  # load_module words it for config files.
      raise _error(f"{item!r}: {str(e).replace('config file', 'rule file', 1)}") from None
  else:
    try:
      module = importlib.import_module(target)
    except Exception as e:  # pylint: disable=broad-except  (any error of the user's module)
      raise _error(f"{item!r}: cannot import module {target!r} ({type(e).__name__}: {e}); put it on "
                   "PYTHONPATH or give the path of a .py file") from None
  keep = getattr(module, function, None)
  if not callable(keep):
    names = [n for n in dir(module) if callable(getattr(module, n)) and not n.startswith("_")]
    close = difflib.get_close_matches(function, names, n=1)
    problem = "no function" if keep is None else "a non-callable"
    raise _error(f"{item!r}: {target!r} has {problem} {function!r}"
                 + (f"; did you mean {close[0]!r}?" if close else f"; define {function}(text) -> bool (True: keep)"))
  return Filter(item, (), lambda text: not keep(text), lambda doc: not keep(doc.text))


def _unknown(item: str, name: str) -> UserError:
  close = difflib.get_close_matches(name, list(PRESETS) + list(RULES), n=1)
  return _error(f"unknown filter {item!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                + f"; presets: {', '.join(PRESETS)}; rules: {', '.join(RULES)}; "
                "or a user rule 'file.py:function' or 'module:function'")


def parse(spec: str) -> list[Filter]:
  """'gopher,c4', 'words=20:1000,stop_words', 'my_rules.py:no_urls' -> Filters, in order, each name once.

  Items, separated by commas: a preset (its rules with their default thresholds); a rule (its defaults);
  'rule=v1:v2' (as many thresholds as the rule's defaults); a user rule 'file.py:function' or
  'module:function', whose function takes the text and returns True to KEEP the document. A rule named more
  than once stays where it first appears; thresholds written out with '=' win over a preset's defaults.
  """
  filters, explicit = {}, {}
  for item in (i.strip() for i in spec.split(",")):
    if not item:
      continue
    name, is_explicit, values = item.partition("=")
    if is_explicit and name.isidentifier():
      if name not in RULES:
        if name in PRESETS:
          raise _error(f"{item!r}: preset {name!r} takes no thresholds; set them per rule, e.g. words=20:1000")
        raise _unknown(item, name)
      thresholds = _thresholds(item, RULES[name], values)
      if explicit.setdefault(name, thresholds) != thresholds:
        raise _error(f"{item!r}: {name} is given twice with different thresholds; keep one")
      filters[name] = _rule_filter(RULES[name], thresholds)
    elif ":" in item:
      target, _, function = item.rpartition(":")
      if target in RULES or target in PRESETS:
        raise _error(f"{item!r}: write thresholds after '=', e.g. {target}={function}")
      filters.setdefault(item, _user_filter(item, target, function))
    elif item in PRESETS or item in RULES:
      for rule in PRESETS.get(item, [item]):
        filters.setdefault(rule, _rule_filter(RULES[rule], RULES[rule].defaults))
    else:
      raise _unknown(item, item)
  return list(filters.values())


def first_failing(filters: list[Filter], text: str) -> str | None:
  """The name of the first filter that removes `text` (None: it passes every one)."""
  doc = Document(text)
  for f in filters:
    if f.removes_document(doc) if f.removes_document else f.removes(text):
      return f.name
  return None
