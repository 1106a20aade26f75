import os
import subprocess
import sys

import pytest

import tensorflow_datasets as tfds

from pretrain.data import corpus, overlap


def test_split_is_deterministic_disjoint_and_complete(corpus_source):
  texts = {split: list(corpus_source.texts(split)) for split in corpus.SPLITS}
  assert len(texts["validation"]) > 50 and len(texts["train"]) > 10 * len(texts["validation"])
  assert 2 * len(texts["validation"]) < len(texts["downstream"]) < 4 * len(texts["validation"])  # 15% and 5%
  assert sorted(sum(texts.values(), [])) == sorted(corpus.documents())
  for split, documents in texts.items():
    assert all(corpus.split_of(t) == split for t in documents)


def test_no_held_out_document_has_half_its_text_in_another_split(corpus_source):
  """The corpus as prepared: each validation or downstream document has less than half of its 13-word shingles in
  the other splits' (train's above all: what a model has seen)."""
  texts = {split: list(corpus_source.texts(split)) for split in corpus.SPLITS}
  for held_out in ("validation", "downstream"):
    assert max(overlap.shares(texts[held_out], texts["train"])) < corpus.HELD_OUT_SHARE
    others = [t for split in corpus.SPLITS if split != held_out for t in texts[split]]
    assert max(overlap.shares(texts[held_out], others)) < corpus.HELD_OUT_SHARE


def test_pydoc_sections_go_with_their_page():
  import pydoc_data.topics  # pylint: disable=g-import-not-at-top
  for section, page in [("customization", "specialnames"), ("with", "compound"), ("try", "compound")]:
    section, page = (pydoc_data.topics.topics[name].strip() for name in (section, page))
    assert overlap.shares([section], [page]) == [1.0]
    assert corpus.split_of(section) == corpus.split_of(page)


def _words(first: int, count: int) -> str:
  """`count` distinct words: no 13-word run of one such text stands in another unless it was copied."""
  return " ".join(f"w{i}" for i in range(first, first + count))


def _salted(texts: list[str], salt: int) -> list[str]:
  """The texts with one more word each: other hashes, so other splits."""
  return [f"{text} salt{salt}" for text in texts]


def test_a_contained_page_and_a_near_copy_go_with_their_document():
  page = _words(0, 300)
  texts = [page, _words(100, 50),                # a section of the page
           _words(0, 60) + " " + _words(1000, 20),  # 48 of its 68 shingles are the page's
           _words(2000, 300) + " " + _words(0, 13),  # one shingle of the page: a quotation, not a copy
           _words(3000, 100)]
  clusters = overlap.Clusters([overlap.shingles(t) for t in texts])
  assert sorted(clusters.members().values()) == [[0, 1, 2], [3], [4]]
  seen = set()
  for salt in range(40):
    split = corpus.assign(_salted(texts, salt))
    assert split[0] == split[1] == split[2]
    seen.add(split[0])
  assert seen == set(corpus.SPLITS)  # The group went to each split in turn, always together.
  # Split alone by their own hashes (corpus 1.1.0), they part.
  assert any(len(set(corpus.assign(_salted(texts, salt), clustered=False)[:3])) > 1 for salt in range(40))


def _worst_held_out_share(texts: list[str], split: list[str]) -> float:
  """The largest share of a held-out document's shingles found in the other splits' documents."""
  return max((overlap.shares([text], [t for t, s in zip(texts, split) if s != own])[0]
              for text, own in zip(texts, split) if own != "train"), default=0.0)


def test_a_patchwork_of_other_documents_is_not_held_out_apart_from_them():
  """A document made of 40-word pieces of twelve others, each piece under overlap.LINK of either document, so no
  pair is a near-copy: where its split would leave most of its text in other splits, it joins their clusters."""
  sources = [_words(1000 * k, 400) for k in range(12)]
  texts = [*sources, " ".join(_words(1000 * k + 100, 40) for k in range(12))]
  assert len(overlap.Clusters([overlap.shingles(t) for t in texts]).members()) == 13
  naive_leaks = 0
  for salt in range(40):
    salted = _salted(texts, salt)
    naive_leaks += _worst_held_out_share(salted, corpus.assign(salted, clustered=False)) >= corpus.HELD_OUT_SHARE
    assert _worst_held_out_share(salted, corpus.assign(salted)) < corpus.HELD_OUT_SHARE
  assert naive_leaks  # The case arose.


def test_no_empty_or_short_documents(corpus_source):
  for split in corpus.SPLITS:
    for text in corpus_source.texts(split):
      assert text == text.strip() and len(text) >= corpus.MIN_DOC_CHARS


def test_documents_know_their_package():
  labelled = dict(corpus.labelled())
  assert labelled[next(t for t in labelled if t.startswith("JSON (JavaScript Object Notation)"))] == "json"
  assert {"email", "asyncio", "xml", "pydoc"} <= set(labelled.values())
  assert list(labelled) == list(corpus.documents())


def test_prepared_once_and_reused(cache_dir, corpus_source):
  del corpus_source  # Prepared it.
  builder = tfds.builder("pretrain_corpus", data_dir=f"{cache_dir}/tfds")
  assert builder.is_prepared()
  assert sum(builder.info.splits[split].num_examples for split in corpus.SPLITS) == len(corpus.documents())


@pytest.mark.slow
def test_processes_that_start_together_prepare_it_once(tmp_path):
  """Two processes on a fresh cache (one per device, parallel workers): one prepares, the other waits and reuses
  it; both keep stdout for results."""
  script = "import sys; from pretrain.data import corpus; corpus.prepare(sys.argv[1])"
  env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
  processes = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "tfds")], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
  results = [(p.wait(timeout=300), *p.communicate()) for p in processes]
  assert [(rc, out) for rc, out, _ in results] == [(0, ""), (0, "")], results
  assert sum("Preparing the bundled corpus" in err for _, _, err in results) == 1
  assert tfds.builder("pretrain_corpus", data_dir=str(tmp_path / "tfds")).is_prepared()


def test_empty_cache_variable_means_the_default(monkeypatch):
  import os  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  from pretrain.system import data_cache  # pylint: disable=g-import-not-at-top
  monkeypatch.setenv("PRETRAIN_CACHE", "")
  assert data_cache.cache_dir(ml_collections.ConfigDict({"cache_dir": ""})) == os.path.expanduser("~/.cache/pretrain")
