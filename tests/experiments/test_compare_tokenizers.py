"""`pretrain experiment compare_tokenizers`: a tiny run of its page."""

import os
import re

import pytest

from pretrain.experiments import compare_tokenizers
from tests.experiments import pages


@pytest.mark.slow
def test_compare_tokenizers_writes_table_and_plot(tmp_path, cache_dir, monkeypatch, capsys):
  monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
  out = str(tmp_path / "docs" / "tokenizers")
  compare_tokenizers.main(["--kinds=bytes", "--row_bytes=64", "--seeds=0",
                           "--d_model=32", "--num_layers=1", "--head_dim=16", "--steps=4", "--batch_size=4",
                           "--evals=2", f"--out={out}", f"--out_dir={tmp_path / 'runs'}",
                           "--config.train.eval_batches=2"])
  assert os.path.getsize(out + ".png") > 0
  rows = {row.split("|")[1].strip(): [c.strip() for c in row.split("|")[2:-1]] for row in pages.table_rows(out + ".md")}
  assert list(rows) == ["bytes"]  # The kinds that learn a vocabulary: tests/vocab/test_tokenizer_kinds.py.
  # ids, row tokens, bytes/token: a byte per token, so rows of --row_bytes tokens.
  assert rows["bytes"][:3] == ["366", "64", "1.00"]
  assert all(re.fullmatch(r"\d\.\d{3}", row[-4]) and re.fullmatch(r"\d\.\d{3}", row[-3]) for row in rows.values())
  assert all(re.fullmatch(r"\d\.\d{3}, \d\.\d{3}", row[-2]) for row in rows.values())  # The count models.
  assert "A difference counts as real" in open(out + ".md").read()
  assert re.search(r"\[seed 0\] bytes +val bits/byte \d", capsys.readouterr().out)
