import pytest

from pretrain.data import filters
from pretrain.system.errors import UserError

# About 90 words of plain prose in three paragraphs: it passes every rule with the default thresholds.
GOOD = """The river runs through the old town and past the market.
Every morning, farmers bring fresh bread, cheese and apples to sell.
Children walk to school along the bank with their friends.

In the afternoon, the square fills with music and quiet conversation.
Visitors often stop to admire the stone bridge that was built centuries ago.
Local historians say it survived three floods and one long war.

When evening comes, lamps glow in the windows of small houses.
People share dinner, tell stories, and plan the next busy day."""
LINES = GOOD.replace("\n\n", "\n").split("\n")
PARAGRAPHS = GOOD.split("\n\n")
LONG_LINE = " ".join(LINES[:4])
LONG_PARAGRAPH = PARAGRAPHS[0] + " " + PARAGRAPHS[1]


def test_the_good_document_passes_every_rule():
  assert len(GOOD.split()) == 89
  assert filters.first_failing(filters.parse("gopher,c4,encoding_errors"), GOOD) is None


# Each rule with a document it keeps and one it removes, at its default thresholds.
CASES = {
    "words": (GOOD, " ".join(GOOD.split()[:40])),
    "mean_word_length": (GOOD, "I am a ox, so do go by. " * 10),
    "symbol_ratio": (GOOD + " #news" * 8, GOOD + " #news" * 12),
    "bullet_lines": ("\n".join(["• " + line for line in LINES[:7]] + LINES[7:]),
                     "\n".join("• " + line for line in LINES)),
    "ellipsis_lines": (GOOD + "\nAnd then...", "\n".join(line[:-1] + "..." for line in LINES)),
    "alphabetic_words": (GOOD + " 42" * 20, GOOD + " 42" * 25),
    "stop_words": ("Cats sleep the day; dogs guard the house. " * 10, "Cats sleep; dogs guard houses. " * 10),
    "duplicate_lines": ("\n".join(LINES + LINES[:3]), "\n".join(LINES + LINES[:4])),
    "duplicate_paragraphs": ("\n\n".join(PARAGRAPHS + PARAGRAPHS[:1]), "\n\n".join(PARAGRAPHS * 2)),
    "duplicate_line_chars": ("\n".join(LINES + ["Yes.", "Yes."]), "\n".join([LONG_LINE] + LINES[4:] + [LONG_LINE])),
    "duplicate_paragraph_chars": ("\n\n".join(PARAGRAPHS + ["Yes.", "Yes."]),
                                  "\n\n".join([LONG_PARAGRAPH, PARAGRAPHS[2], LONG_PARAGRAPH])),
    "top_ngrams": (GOOD + " the cat" * 5, GOOD + " the cat" * 30),
    "duplicate_ngrams": (GOOD + " " + " ".join(GOOD.split()[:6]), GOOD + " " + " ".join(GOOD.split()[:40])),
    "sentences": ("One. Two! Three?", "One sentence here. Then e.g. no end"),
    "lorem_ipsum": (GOOD + " Lorem is a name.", GOOD + " Lorem Ipsum dolor sit amet."),
    "curly_braces": (GOOD + " (a) [b]", GOOD + " {b}"),
    "boilerplate": ("\n".join(LINES + ["Fine.", "This site uses cookies."]),
                    "\n".join(LINES + ["This site uses cookies.", "Enable JavaScript."])),
    "terminal_punctuation": (GOOD + '\nHome\nShe said "yes."\nIt\'s \'fine\'', "\n".join(["Home", "About", "Contact"] + LINES[:2])),
    "encoding_errors": (GOOD + " Café, naïve, château, São Paulo, Âge.", GOOD + " cafÃ© dâ€™accord \ufffd"),
}


def test_every_rule_has_a_case():
  assert list(CASES) == list(filters.RULES)


@pytest.mark.parametrize("name", list(CASES))
def test_a_rule_keeps_one_document_and_removes_another(name):
  kept, removed = CASES[name]
  (rule,) = filters.parse(name)
  assert rule.thresholds == filters.RULES[name].defaults
  assert not rule.removes(kept)
  assert rule.removes(removed)
  assert filters.first_failing([rule], removed) == name


def test_the_longest_document_and_empty_ones():
  assert filters.parse("words=1:10")[0].removes(GOOD)
  assert filters.first_failing(filters.parse("gopher"), "") == "words"
  assert filters.first_failing(filters.parse("c4"), "") == "sentences"


def test_presets_expand_in_order():
  assert [f.name for f in filters.parse("gopher")] == [
      "words", "mean_word_length", "symbol_ratio", "bullet_lines", "ellipsis_lines", "alphabetic_words",
      "stop_words", "duplicate_lines", "duplicate_paragraphs", "duplicate_line_chars",
      "duplicate_paragraph_chars", "top_ngrams", "duplicate_ngrams"]
  assert [f.name for f in filters.parse(" c4 , lorem_ipsum,, ")] == [
      "sentences", "lorem_ipsum", "curly_braces", "boilerplate", "terminal_punctuation"]
  assert filters.parse("") == [] and filters.parse(" ") == []


@pytest.mark.parametrize("spec", ["gopher,words=10:20", "words=10:20,gopher", "words, gopher, words=10:20"])
def test_explicit_thresholds_override_a_preset_where_the_rule_first_appears(spec):
  parsed = filters.parse(spec)
  assert [f.name for f in parsed] == filters.PRESETS["gopher"]
  assert parsed[0].thresholds == (10, 20)
  assert parsed[0].removes(GOOD)


def test_first_failing_reports_the_first_rule_in_order_and_the_same_each_time():
  short = "Too short. Far too short."
  assert filters.first_failing(filters.parse("sentences,words"), short) == "sentences"
  assert filters.first_failing(filters.parse("words,sentences"), short) == "words"
  parsed = filters.parse("gopher,c4")
  assert filters.first_failing(parsed, GOOD * 2) == filters.first_failing(parsed, GOOD * 2) == "duplicate_lines"


RULE_FILE = 'def no_urls(text):\n  return "http" not in text\n\nnot_a_function = 3\n'


def test_a_user_rule_from_a_file(tmp_path):
  path = tmp_path / "my_rules.py"
  path.write_text(RULE_FILE)
  parsed = filters.parse(f"words, {path}:no_urls")
  assert [f.name for f in parsed] == ["words", f"{path}:no_urls"]
  assert filters.first_failing(parsed, GOOD) is None
  assert filters.first_failing(parsed, GOOD + " See http://example.com.") == f"{path}:no_urls"


def test_a_user_rule_from_a_module(tmp_path, monkeypatch):
  (tmp_path / "filters_test_rules.py").write_text(RULE_FILE)
  monkeypatch.syspath_prepend(str(tmp_path))
  (rule,) = filters.parse("filters_test_rules:no_urls")
  assert rule.name == "filters_test_rules:no_urls"
  assert not rule.removes(GOOD) and rule.removes("http://example.com")


@pytest.mark.parametrize("spec, words", [
    ("wrods", ["unknown filter 'wrods'", "did you mean 'words'", "gopher", "duplicate_ngrams", "file.py:function"]),
    ("gopher=1", ["preset 'gopher' takes no thresholds"]),
    ("nonsense=1", ["unknown filter"]),
    ("words=a:b", ["must be numbers", "words=50:100000"]),
    ("words=", ["must be numbers"]),
    ("words=10", ["two numbers 0 <= min <= max", "got 1;"]),
    ("top_ngrams=0.1:0.1", ["three fractions"]),
    ("words=100:10", ["out of range", "0 <= min <= max"]),
    ("bullet_lines=1.5", ["out of range", "0 <= x <= 1"]),
    ("stop_words=-1", ["out of range", ">= 0"]),
    ("lorem_ipsum=1", ["takes no thresholds", "write lorem_ipsum"]),
    ("words:20", ["after '='", "words=20"]),
    ("words=1:2,words=3:4", ["given twice"]),
    ("{tmp}/missing.py:no_urls", ["no file", "missing.py"]),
    ("no_such_module_for_filters:f", ["cannot import module 'no_such_module_for_filters'", "PYTHONPATH"]),
    ("{tmp}/rules.py:no_url", ["no function 'no_url'", "did you mean 'no_urls'"]),
    ("{tmp}/rules.py:not_a_function", ["non-callable 'not_a_function'"]),
    ("{tmp}/broken.py:f", ["rule file", "syntax error"]),
])
def test_bad_specs_give_one_line_that_names_the_problem(tmp_path, spec, words):
  (tmp_path / "rules.py").write_text(RULE_FILE)
  (tmp_path / "broken.py").write_text("def f(text)\n  return True\n")
  with pytest.raises(UserError) as error:
    filters.parse(spec.format(tmp=tmp_path))
  message = str(error.value)
  assert message.startswith("data.filters: ") and "\n" not in message
  for word in words:
    assert word in message
