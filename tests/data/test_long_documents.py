"""A single huge document: cut into pieces before tokenization, so memory stays bounded; tokenizer training
learns from it instead of leaving it out."""

import os
import random
import subprocess
import sys

import pytest
import tensorflow as tf

from pretrain import objectives, vocab
from pretrain.data import long_documents
from tests.conftest import REPO, TINY


def _words(chars: int, seed: int = 0) -> str:
  """Space-separated words with accented letters (multi-byte UTF-8), no line breaks."""
  rng = random.Random(seed)
  words = ["".join(rng.choice("abcdeéfghiïjklmnoöpqrstuvwxyzλόγ") for _ in range(rng.randint(1, 9)))
           for _ in range(2000)]
  text = []
  while sum(map(len, text)) < chars:
    text.append(" ".join(rng.choice(words) for _ in range(1000)) + " ")
  return "".join(text)


def test_pieces_are_bounded_whole_characters_and_rejoin():
  text = _words(50_000).encode()
  for max_bytes in (4192, 1000, 7):
    pieces = long_documents.pieces(text, max_bytes)
    assert b"".join(pieces) == text and max(map(len, pieces)) <= max_bytes
    assert all(p.decode("utf-8") for p in pieces)  # Never cut inside a character.
  assert long_documents.pieces(b"line one\nline two", 12) == [b"line one\n", b"line two"]  # At a line break first.
  assert long_documents.pieces("é".encode() * 5, 3) == ["é".encode()] * 5  # No space: at a character boundary.
  assert long_documents.pieces(b"short") == [b"short"]


def test_long_documents_become_pieces_in_order_and_short_ones_pass():
  long = _words(long_documents.MAX_DOCUMENT_BYTES * 2 + 100).encode()
  dataset = tf.data.Dataset.from_tensor_slices({"targets": [b"first", long, b"last"]})
  texts = [e["targets"] for e in long_documents.split_long_documents(dataset).as_numpy_iterator()]
  assert texts[0] == b"first" and texts[-1] == b"last" and b"".join(texts[1:-1]) == long
  assert len(texts) == 2 + 3 and all(len(t) <= long_documents.MAX_DOCUMENT_BYTES for t in texts)


def test_a_tokenizer_learns_from_one_document_without_paragraph_breaks():
  """Its lines were once all over SentencePiece's length limit and left out: no sentences to train on."""
  model = vocab.train([_words(300_000)], "sentencepiece", 500, "unigram", 100, objectives.pieces())
  assert len(model) > 1000


@pytest.mark.slow
def test_a_12_mb_document_trains_in_bounded_memory(tmp_path, cache_dir, vocabulary):
  """Tokenized whole, a document took about 125 bytes per byte of text (a 32 MB one peaked at 11.7 GB). In pieces,
  a run on one 12 MB document peaks within 1 GiB of a run on the same text as 6,000 short documents (both
  measured side by side, as this machine's baseline varies)."""
  text = _words(12_000_000)
  (tmp_path / "one.txt").write_text(text + "\n")
  (tmp_path / "many.txt").write_text("\n".join(text[i:i + 2000] for i in range(0, len(text), 2000)) + "\n")
  measured = ("import resource, sys; from pretrain import cli; code = cli.main(sys.argv[1:]); "
              "print('peak', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10); sys.exit(code)")
  runs = {name: subprocess.Popen(
      [sys.executable, "-c", measured, "train", f"--workdir={tmp_path}/{name}", *TINY, "--config.data.source=files",
       f"--config.data.train_files={tmp_path}/{name}.txt", f"--config.data.validation_files={tmp_path}/{name}.txt",
       f"--config.tokenizer.path={vocabulary.sentencepiece_model_file}", "--config.train.steps=1",
       "--config.sample.num=0", "--config.train.eval_batches=1"],
      cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env={**os.environ, "PRETRAIN_CACHE": cache_dir})
      for name in ("one", "many")}
  peaks = {}
  for name, process in runs.items():
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-3000:]
    peaks[name] = int(out.split("peak ")[-1])
  assert peaks["one"] < peaks["many"] + (1 << 30), {k: f"{v / 2**30:.2f} GiB" for k, v in peaks.items()}
