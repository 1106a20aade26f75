"""The index-addressed training stream (data.pipeline=indexed) and its token stores: resuming at a position gives
the batches an uninterrupted run reads, with any batch size; an epoch reads every document once; stores are
keyed by the vocabulary and never read half-written."""

import glob
import json
import os
import re
import shutil
import threading

import numpy as np
import pytest

from pretrain import run as run_lib
from pretrain.data import indexed, token_store
from pretrain.system import data_cache
from pretrain.system.errors import UserError
from pretrain.vocab import long_texts, pipeline as vocab
from tests.conftest import tiny_config


def _run(cache_dir, *args):
  return run_lib.Run.build_with_data(tiny_config(f"--config.data.cache_dir={cache_dir}", *args))


def _take(batches, n):
  return [next(batches) for _ in range(n)]


def _rows(batches):
  return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


@pytest.fixture
def zebra_files(tmp_path):
  (tmp_path / "zebra.txt").write_text("\n".join(f"zebra {i} " * 20 for i in range(300)))
  return f"{tmp_path}/*.txt"


@pytest.mark.parametrize("args", [
    ["--config.data.objective=clm"],
    ["--config.data.objective=span_corruption", "--config.data.inputs_length=64", "--config.data.targets_length=16"],
    ["--config.data.objective=ul2", "--config.data.inputs_length=64", "--config.data.targets_length=64"],
    ["--config.data.objective=clm", "MIXTURE"],
], ids=["clm", "span_corruption", "ul2", "mixture"])
@pytest.mark.slow
def test_resuming_at_a_position_continues_the_uninterrupted_stream(cache_dir, vocabulary, zebra_files, args):
  del vocabulary  # Cached first, so the runs find it.
  if "MIXTURE" in args:
    args = [args[0], f"--config.data.mixture=(('corpus', '', 1.0), ('files', '{zebra_files}', 1.0))"]
  run = _run(cache_dir, *args)
  uninterrupted = run.train_batches()
  first = _take(uninterrupted, 3)
  position = uninterrupted.position()
  assert len(json.dumps(position)) < 1000
  expected = _take(uninterrupted, 4)
  resumed = _take(run.train_batches(position), 4)
  for got, want in zip(resumed, expected):
    for k in want:
      np.testing.assert_array_equal(got[k], want[k])
  assert not all(np.array_equal(a[k], b[k]) for a, b in zip(first, expected) for k in a)  # Not a constant stream.
  # Another batch size (8 rows, two of the 4-row batches) continues the same rows.
  bigger = run_lib.Run.build_with_data(tiny_config(f"--config.data.cache_dir={cache_dir}", *args,
                                                   "--config.train.batch_size=8"))
  for got, want in zip(_take(bigger.train_batches(position), 2), (_rows(expected[:2]), _rows(expected[2:]))):
    for k in want:
      np.testing.assert_array_equal(got[k], want[k])
  if "--config.data.mixture" in args[-1]:  # Both members are read, each from its own position.
    assert all(window >= 0 and row >= 0 for window, row in bigger.train_batches(position).position()
               ["streams"][0]["members"])


def test_a_saved_position_of_another_stream_restarts_it_or_is_refused(capsys):
  fresh = indexed.start_position("corpus_clm", 0, 2, ["corpus-train-1"], [128])
  saved = {**fresh, "streams": [{"rows": 40, "members": [[6, 2]]}, {"rows": 40, "members": [[7, 3]]}]}
  assert indexed.resume_position(saved, fresh) == saved
  for key, value, what in (("seed", 1, "train.seed"), ("stores", ["corpus-train-2"], "token stores"),
                           ("windows", [64], "documents per window")):
    assert indexed.resume_position({**saved, key: value}, fresh) == fresh
    said = capsys.readouterr().out
    assert what in said and "reading the data from its start" in said
  with pytest.raises(UserError, match="--config.data.streams=2"):
    indexed.resume_position(saved, indexed.start_position("corpus_clm", 0, 1, ["corpus-train-1"], [128]))
  with pytest.raises(UserError, match="--config.data.pipeline=replay"):
    indexed.resume_position({"task": "corpus_clm", "examples": 8, "batch_size": 4, "processes": 1}, fresh)


@pytest.mark.slow
def test_a_run_resumed_on_a_moved_cache_reads_on_where_it_stood(cache_dir, vocabulary, tmp_path, capsys):
  """The data cache moved (a new host, a moved disk): its prepared corpus and vocabulary copied, the token store
  built again there. The position names the store by what it holds, so the resume reads the batches the run
  would have read (the same losses), not the data from its start; so does a position that named the store by
  its directory, as checkpoints did before."""
  del vocabulary  # Cached first, so the runs find it.
  run = _run(cache_dir)
  uninterrupted = run.train_batches()
  _take(uninterrupted, 2)
  position = uninterrupted.position()
  expected = _take(uninterrupted, 2)
  moved = tmp_path / "moved"
  for kept in ("tfds", "tokenizers"):
    shutil.copytree(os.path.join(cache_dir, kept), moved / kept)
  capsys.readouterr()
  _assert_same(_take(_run(moved).train_batches(position), 2), expected)
  assert "Tokenizing the train split" in capsys.readouterr().out  # Built again, in the moved cache.
  _, source, _ = run.member_tasks()[0]
  by_directory = os.path.basename(token_store.directory(cache_dir, source, "train", run.vocabulary))
  assert position["stores"] != [by_directory]
  _assert_same(_take(run.train_batches({**position, "stores": [by_directory]}), 2), expected)
  assert "from its start" not in capsys.readouterr().out


def _assert_same(batches, expected):
  for got, want in zip(batches, expected, strict=True):
    for k in want:
      np.testing.assert_array_equal(got[k], want[k])


@pytest.mark.slow
def test_streams_fill_their_rows_of_each_batch(cache_dir, vocabulary):
  del vocabulary
  two = _run(cache_dir, "--config.data.streams=2")
  batches = _take(two.train_batches(), 3)
  position = two.train_batches().position()
  assert [s["members"] for s in position["streams"]] == [[[0, 0]], [[1, 0]]]  # Stream s starts at window s.
  # Stream 1 alone (what a host holding rows 2 and 3 of each batch reads) gives those rows.
  fn = indexed.window_rows(*_row_args(two, 0))
  stream1 = indexed.member_rows(fn, 1, 2, (1, 0)).batch(2).as_numpy_iterator()
  for batch in batches:
    np.testing.assert_array_equal(next(stream1)["decoder_target_tokens"], batch["decoder_target_tokens"][2:])
  with pytest.raises(UserError, match="data.streams=2"):
    _run(cache_dir, "--config.data.streams=1").train_batches(position)
  with pytest.raises(UserError, match="multiple of 3"):
    _run(cache_dir, "--config.data.streams=3").train_batches()


def _row_args(run, member):
  task, source, _ = run.member_tasks()[member]
  store = token_store.open_or_build(task, source, "train", run.vocabulary, run.cfg.data.cache_dir)
  return task, store, run.family.converter(), run.task_lengths, run.cfg.train.seed, member


@pytest.mark.slow
def test_an_epoch_reads_every_document_once(cache_dir, vocabulary):
  del vocabulary
  run = _run(cache_dir)
  task, store, converter, lengths, seed, member = _row_args(run, 0)
  size = indexed.window_size(store, lengths)
  assert 1 < size < len(store) // 2  # About WINDOW_ROWS rows of 32 tokens: several documents, several windows.
  per_epoch = -(-len(store) // size)
  windows = [indexed.window_documents(len(store), size, seed, member, g).numpy() for g in range(2 * per_epoch)]
  for epoch in (0, 1):
    documents = np.concatenate(windows[epoch * per_epoch:(epoch + 1) * per_epoch])
    np.testing.assert_array_equal(np.sort(documents), np.arange(len(store)))
  assert not np.array_equal(np.concatenate(windows[:per_epoch]), np.concatenate(windows[per_epoch:]))
  # Causal LM rows of an epoch hold each token of the store once, and one EOS per document.
  rows = indexed.member_rows(indexed.window_rows(task, store, converter, lengths, seed, member), 0, 1, (0, 0))
  targets = 0
  for row in rows.take_while(lambda r: r["window"] < per_epoch).as_numpy_iterator():
    targets += int(np.sum(row["decoder_loss_weights"]))
  assert targets == store.meta["tokens"] + len(store)


def test_a_store_is_keyed_by_its_vocabulary_and_an_interrupted_build_is_rebuilt(cache_dir, vocabulary):
  run = _run(cache_dir)
  task, source, _ = run.member_tasks()[0]
  store_dir = token_store.directory(cache_dir, source, "validation", vocabulary)
  # An interrupted build: a shard's temporary file, no store.json. It is never read, and the next build redoes it.
  os.makedirs(store_dir, exist_ok=True)
  partial = os.path.join(store_dir, "documents-00000-of-00001.array_record.tmp-dead")
  open(partial, "wb").write(b"half a record")
  with pytest.raises(UserError, match="not a finished token store"):
    token_store.TokenStore(store_dir, vocabulary)
  store = token_store.open_or_build(task, source, "validation", vocabulary, cache_dir)
  assert not glob.glob(os.path.join(store_dir, "*.tmp-*"))
  documents = task.preprocess_precache(source.data_source.get_dataset(source.splits["validation"], shuffle=False))
  first = next(documents.as_numpy_iterator())["targets"]
  tokens, sizes = store.read([0])
  np.testing.assert_array_equal(tokens, first)
  assert sizes.tolist() == [len(first)] and store.meta["documents"] == [documents.reduce(0, lambda n, _: n + 1)]
  # Another vocabulary has another store, and a store refuses to be read with the wrong one.
  other = vocab.load(vocabulary.sentencepiece_model_file, extra_ids=vocabulary.extra_ids + 1)
  assert token_store.directory(cache_dir, source, "validation", other) != store_dir
  with pytest.raises(UserError, match="another vocabulary"):
    token_store.TokenStore(store_dir, other)


def test_a_store_of_any_shards_reads_in_the_source_s_order_with_documents_cut_into_pieces(cache_dir, vocabulary,
                                                                                          tmp_path):
  """Documents over MAX_DOCUMENT_BYTES become several records of their shard: read in order (data.context=stream),
  every record of the text comes once, each long document's pieces in a row, whatever the shards."""
  long_text = lambda word: " ".join([word] * (long_texts.MAX_DOCUMENT_BYTES // len(word) + 2000))
  lines = [f"zebra {i} yak" for i in range(11)]
  lines[3], lines[8] = long_text("giraffe"), long_text("okapi")  # In shards 0 and 2 of 3 (documents 3 and 8).
  (tmp_path / "long.txt").write_text("\n".join(lines))
  run = _run(cache_dir, "--config.data.source=files", f"--config.data.train_files={tmp_path}/long.txt",
             f"--config.data.validation_files={tmp_path}/long.txt",
             f"--config.tokenizer.path={vocabulary.sentencepiece_model_file}")
  task, source, _ = run.member_tasks()[0]
  whole = [d["targets"] for d in task.preprocess_precache(source.data_source.get_dataset("train", shuffle=False))
           .as_numpy_iterator()]
  assert len(whole) >= len(lines) + 2  # Each long document is several records.
  for count in (1, 2, 3):
    store_dir = os.path.join(str(tmp_path), f"shards{count}")
    for index in range(count):
      token_store.build_shard(task, source, "train", vocabulary, store_dir, index, count)
    store = token_store.TokenStore(store_dir, vocabulary)
    tokens, sizes = store.read_in_order(np.arange(len(store)))
    assert sizes.tolist() == [len(d) for d in whole], count
    np.testing.assert_array_equal(tokens, np.concatenate(whole))


def test_two_shards_make_the_store(cache_dir, vocabulary, zebra_files):
  run = _run(cache_dir, "--config.data.source=files", f"--config.data.train_files={zebra_files}",
             f"--config.tokenizer.path={vocabulary.sentencepiece_model_file}")
  task, source, _ = run.member_tasks()[0]
  store_dir = os.path.join(cache_dir, "sharded")
  token_store.build_shard(task, source, "train", vocabulary, store_dir, 1, 2)
  assert not os.path.exists(os.path.join(store_dir, token_store.META))  # Waits for shard 0.
  token_store.build_shard(task, source, "train", vocabulary, store_dir, 0, 2)
  store = token_store.TokenStore(store_dir, vocabulary)
  whole = list(task.preprocess_precache(source.data_source.get_dataset("train", shuffle=False)).as_numpy_iterator())
  assert len(store) == len(whole) and store.meta["documents"] == [(len(whole) + 1) // 2, len(whole) // 2]
  tokens, sizes = store.read([0, store.starts[1]])  # Shard 0 holds documents 0, 2, ...; shard 1 holds 1, 3, ...
  np.testing.assert_array_equal(tokens, np.concatenate([whole[0]["targets"], whole[1]["targets"]]))
  assert sizes.tolist() == [len(whole[0]["targets"]), len(whole[1]["targets"])]
  in_order, _ = store.read_in_order(np.arange(len(store)))
  np.testing.assert_array_equal(in_order, np.concatenate([d["targets"] for d in whole]))
  # data.context=stream: every row is a cut of the text in the source's order, not of the shards' order.
  stream = _run(cache_dir, "--config.data.source=files", f"--config.data.train_files={zebra_files}",
                f"--config.tokenizer.path={vocabulary.sentencepiece_model_file}", "--config.data.context=stream")
  task, _, objective = stream.member_tasks()[0]
  assert objective.in_order
  text = np.concatenate([np.append(d["targets"], vocabulary.eos_id) for d in whole]).astype(np.int32).tobytes()
  windows = indexed.window_rows(task, store, stream.family.converter(), stream.task_lengths, 0, 0, in_order=True)
  rows = list(indexed.member_rows(windows, 0, 1, (0, 0)).take(8).as_numpy_iterator())
  assert any(len(set(r["decoder_segment_ids"])) == 1 and r["decoder_loss_weights"].all() for r in rows)
  for row in rows:
    tokens = row["decoder_target_tokens"][row["decoder_loss_weights"] > 0]
    assert tokens.astype(np.int32).tobytes() in text, tokens


def test_a_shard_that_another_process_builds_is_waited_for(cache_dir, vocabulary, zebra_files):
  """Processes that start together on a fresh cache: the one that comes second touches nothing until the first
  has finished the shard (it once deleted the first's temporary file as an interrupted build's leftover)."""
  run = _run(cache_dir, "--config.data.source=files", f"--config.data.train_files={zebra_files}",
             f"--config.tokenizer.path={vocabulary.sentencepiece_model_file}")
  task, source, _ = run.member_tasks()[0]
  store_dir = os.path.join(cache_dir, "contended")
  shard = os.path.join(store_dir, "documents-00000-of-00001.array_record")
  second = threading.Thread(target=token_store.build_shard, args=(task, source, "train", vocabulary, store_dir))
  with data_cache.held(shard):  # As the first builder holds it.
    second.start()
    second.join(timeout=3)
    assert second.is_alive() and os.listdir(store_dir) == [os.path.basename(shard) + ".lock"]
  second.join(timeout=300)
  whole = task.preprocess_precache(source.data_source.get_dataset("train", shuffle=False))
  assert len(token_store.TokenStore(store_dir, vocabulary)) == len(list(whole.as_numpy_iterator()))


def test_beam_builds_the_store_that_the_shards_build(tmp_path, vocabulary, zebra_files, capsys):
  from pretrain.commands import prepare_data  # pylint: disable=g-import-not-at-top
  data = ("--config.data.source=files", f"--config.data.train_files={zebra_files}",
          f"--config.tokenizer.path={vocabulary.sentencepiece_model_file}")
  [by_beam] = prepare_data.prepare_with_beam(tiny_config(f"--config.data.cache_dir={tmp_path}/beam", *data), 2,
                                             "--runner=DirectRunner --direct_num_workers=2")
  by_hand = tiny_config(f"--config.data.cache_dir={tmp_path}/hand", *data)
  prepare_data.prepare(by_hand, 1, 2)
  [by_shards] = prepare_data.prepare(by_hand, 0, 2)
  assert by_beam["documents"] == by_shards["documents"] > 0 and by_beam["tokens"] == by_shards["tokens"]
  stores = [token_store.TokenStore(s["directory"], vocabulary) for s in (by_beam, by_shards)]
  assert stores[0].meta == stores[1].meta
  everything = np.arange(len(stores[0]))
  np.testing.assert_array_equal(stores[0].read(everything)[0], stores[1].read(everything)[0])
  with pytest.raises(SystemExit):
    prepare_data.main(["--beam=--runner=DirectRunner", "--shard=1", "--num_shards=2"])
  assert "--beam builds every shard; leave out --shard" in capsys.readouterr().err


@pytest.mark.slow
def test_prepare_data_command(vocabulary, run_pretrain):
  result = run_pretrain("prepare-data", "--config=configs/quickstart.py")
  assert result.returncode == 0, result.stderr
  store = token_store.TokenStore(result.stdout.split(": ", 1)[1].split(" (")[0], vocabulary)
  assert f"corpus: {store.directory} ({len(store):,} documents, {store.meta['tokens']:,} tokens" in result.stdout
  bad = run_pretrain("prepare-data", "--shard=2", "--num_shards=2")
  assert bad.returncode == 2 and "give 0 <= shard < num_shards" in bad.stderr


@pytest.mark.slow
def test_a_stream_epoch_reads_runs_of_documents_in_order_and_every_token_once(cache_dir, vocabulary):
  """data.context=stream: each window is a run of consecutive documents in the store's order (the text's
  context), an epoch visits every run once in a seeded order, its runs cut where the last epoch's did not, and
  its rows hold each token of the store once, with one EOS per document, with no segments inside a row."""
  del vocabulary
  run = _run(cache_dir, "--config.data.context=stream")
  task, store, converter, lengths, seed, member = _row_args(run, 0)
  size = indexed.window_size(store, lengths)
  per_epoch = -(-len(store) // size)
  windows = [indexed.window_documents(len(store), size, seed, member, g, in_order=True).numpy()
             for g in range(2 * per_epoch)]
  assert all((np.diff(w) % len(store) == 1).all() for w in windows)  # In order, the last wrapping to the first.
  starts = [{w[0] for w in windows[e * per_epoch:(e + 1) * per_epoch]} for e in (0, 1)]
  assert not starts[0] & starts[1]  # Each epoch's runs start at other documents, so its rows are cut elsewhere.
  for epoch in (0, 1):
    np.testing.assert_array_equal(np.sort(np.concatenate(windows[epoch * per_epoch:(epoch + 1) * per_epoch])),
                                  np.arange(len(store)))
  assert [w[0] for w in windows[:per_epoch]] != [w[0] for w in windows[per_epoch:]]
  rows = indexed.member_rows(indexed.window_rows(task, store, converter, lengths, seed, member, in_order=True),
                             0, 1, (0, 0))
  targets, full = 0, 0
  for row in rows.take_while(lambda r: r["window"] < per_epoch).as_numpy_iterator():
    targets += int(np.sum(row["decoder_loss_weights"]))
    full += int((row["decoder_segment_ids"] == 1).all())
    assert row["decoder_segment_ids"].max() == 1
  assert targets == store.meta["tokens"] + len(store) and full >= targets // lengths["targets"] - per_epoch
  batch = next(run.train_batches())  # The run's own pipeline reads the same way.
  assert batch["decoder_segment_ids"].max() == 1


def test_a_store_of_many_unknown_tokens_is_warned_of(tmp_path, capfd):
  """A user's SentencePiece model without byte fallback spells no accented or CJK text: 1 in 20 tokens were
  <unk>, silently, and bits per byte counted them as no bytes."""
  import io  # pylint: disable=g-import-not-at-top
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  plain = [f"the zebra number {i} eats grass in the field" for i in range(300)]
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(sentence_iterator=iter(plain), model_writer=model, vocab_size=60, pad_id=0, eos_id=1,
                                 unk_id=2, bos_id=-1, minloglevel=2, logstream=open(os.devnull, "w"))
  (tmp_path / "plain.model").write_bytes(model.getvalue())
  (tmp_path / "text.txt").write_text("\n".join([*plain, *(f"café naïve 日本語 {i}" for i in range(100))]))
  run = _run(tmp_path / "cache", "--config.data.source=files", f"--config.data.train_files={tmp_path}/text.txt",
             f"--config.tokenizer.path={tmp_path}/plain.model", "--config.tokenizer.extra_ids=0")
  task, source, _ = run.member_tasks()[0]
  store = token_store.open_or_build(task, source, "train", run.vocabulary, str(tmp_path / "cache"))
  assert 0 < store.meta["unknown"] < store.meta["tokens"]
  assert re.search(r"warning: [\d,]+ of the [\d,]+ tokens of the train split of files \([\d.]+%\) are <unk>",
                   capfd.readouterr().out)
