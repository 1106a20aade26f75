"""A source's documents, tokenized once and stored for random access (ArrayRecord, one record per document).

The store of a (source, split, vocabulary) holds what the task's pre-cache
preprocessors make of each document (rekey, split long documents, tokenize:
everything before its seqio.CacheDatasetPlaceholder), in the source's order.
It lives under the cache directory, keyed by the source's identity and the
vocabulary's bytes, so every run and every objective over that source reuses
it, and a store of another vocabulary is never read. A run's data position
names a store by what it holds (content_id), not where it lives: a run resumes
exactly on a moved cache or a store rebuilt in another one.

It is built in shards: shard i of n holds every n-th document from the i-th,
so the hosts of a job (`pretrain prepare-data --shard=i --num_shards=n`) can
build one each. Each shard file is written under a temporary name and renamed
when complete; store.json, written last, names the shards and their document
counts, sizes and SHA-256 digests. A store without store.json is unfinished
(an interrupted build) and is never read: the next build starts it again.

Opening a store checks it against store.json: every shard there and of its
size, and, for stores up to VERIFY_BYTES, of its digest. A damaged store (a
shard cut short, missing or with changed bytes, a store.json that is not
JSON) is moved aside and built again; a read that fails later names the
store and the fix.
"""

import contextlib
import functools
import glob
import hashlib
import json
import os
import threading
import uuid

import numpy as np
import tqdm
from array_record.python import array_record_module

from pretrain.system import data_cache, files, tf_loader
from pretrain.system.console import log
from pretrain.system.errors import UserError
from pretrain.vocab.ids import UNK_ID
from pretrain.vocab.long_texts import MAX_DOCUMENT_BYTES, pieces

FORMAT = 1             # Bump when the stored records change meaning.
META = "store.json"
# One record per group: a window's documents are read at random places.
WRITER_OPTIONS = "group_size:1"
READER_OPTIONS = "readahead_buffer_size:0,max_parallelism:0"
VERIFY_BYTES = 1 << 30  # Stores up to this size have their digests checked when opened (about a second per GiB).


class Damaged(Exception):
  """A store that does not match its store.json."""


def _digest(path: str) -> str:
  sha = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      sha.update(block)
  return sha.hexdigest()


def vocabulary_digest(vocabulary) -> str:
  return hashlib.sha256(vocabulary.identity + str(vocabulary.extra_ids).encode()).hexdigest()[:16]


def directory(cache: str, source, split: str, vocabulary) -> str:
  """Where the store of `source`'s `split` tokenized with `vocabulary` lives."""
  key = json.dumps([FORMAT, source.identity(split), vocabulary_digest(vocabulary)], sort_keys=True)
  return os.path.join(cache, "token_stores", f"{source.name}-{split}-{hashlib.sha256(key.encode()).hexdigest()[:16]}")


def content_id(store_dir: str, meta: dict) -> str:
  """The store's name in a run's data position: its kind (source and split) and a digest of what it holds (its
  shards' bytes and document counts, dtype and vocabulary), the same for a copy of it or a rebuild in another
  cache. A store written before digests were recorded: its directory's name."""
  name = os.path.basename(os.path.normpath(store_dir))
  if not meta.get("sha256") or None in meta["sha256"]:
    return name
  held = [meta.get("format"), meta["vocabulary"], meta["dtype"], meta["documents"], meta["sha256"]]
  return f"{name.rsplit('-', 1)[0]}-{hashlib.sha256(json.dumps(held).encode()).hexdigest()[:16]}"


def saved_id(cache: str, name: str) -> str:
  """The content_id of a store that a checkpoint named by its directory (before positions named stores by what
  they hold), where that store is still in `cache`; else `name`."""
  meta_path = os.path.join(cache, "token_stores", name, META)
  if "/" in name or not os.path.exists(meta_path):
    return name
  try:
    return content_id(os.path.dirname(meta_path), _read_meta(meta_path))
  except Damaged:
    return name


def _shard_name(index: int, count: int) -> str:
  return f"documents-{index:05d}-of-{count:05d}.array_record"


def _dtype(vocabulary) -> np.dtype:
  return np.dtype("<u2") if vocabulary.vocab_size <= 1 << 16 else np.dtype("<i4")


def build_shard(task, source, split: str, vocabulary, store_dir: str, index: int = 0, count: int = 1) -> None:
  """Writes shard `index` of `count` of the store (unless it is there), and store.json once every shard is."""
  files.makedirs(store_dir)
  path = os.path.join(store_dir, _shard_name(index, count))
  data_cache.build_once(path, lambda: os.path.exists(path + ".json"),  # Once, when processes start together.
                        lambda: _write_shard(task, source, split, vocabulary, path, index, count))
  _finish(store_dir, source, split, vocabulary, count)


def _write_shard(task, source, split: str, vocabulary, path: str, index: int, count: int) -> None:
  tf = tf_loader.tensorflow()  # The data stack.
  for stale in glob.glob(path + ".tmp-*"):  # An interrupted build's leftovers.
    os.remove(stale)
  dataset = source.data_source.get_dataset(source.splits[split], shuffle=False)
  if count > 1:
    dataset = dataset.shard(count, index)
  cut = _cut_documents(dataset, source.text_key) if count > 1 else []
  dataset = task.preprocess_precache(dataset).map(lambda ex: ex["targets"])
  dtype, documents, tokens, unknown = _dtype(vocabulary), 0, 0, 0
  temporary = f"{path}.tmp-{uuid.uuid4().hex}"
  writer = array_record_module.ArrayRecordWriter(temporary, WRITER_OPTIONS)
  try:
    with source.reading(split), tqdm.tqdm(desc=f"Tokenizing {source.name} {split} (shard {index + 1} of {count})",
                                          unit=" documents", dynamic_ncols=True) as bar:
      for document in dataset.prefetch(tf.data.AUTOTUNE).as_numpy_iterator():
        writer.write(document.astype(dtype).tobytes())
        documents, tokens = documents + 1, tokens + len(document)
        unknown += int(np.count_nonzero(document == UNK_ID))
        bar.update(1)
    writer.close()  # Writes the last chunk: a full disk can fail here too.
  except BaseException:
    with contextlib.suppress(Exception):
      writer.close()
    os.remove(temporary)
    raise
  if not documents:
    os.remove(temporary)
    raise UserError(f"the {split} split of {source.name} holds no documents for shard {index + 1} of {count}; "
                    "add data or build fewer shards")
  os.replace(temporary, path)
  files.write_atomically(path + ".json", json.dumps({"documents": documents, "tokens": tokens, "unknown": unknown,
                                                     "cut": cut,
                                                     "bytes": os.path.getsize(path), "sha256": _digest(path)}).encode())


def _cut_documents(dataset, text_key: str) -> list[list[int]]:
  """[index in the shard, records] of each of the shard's source documents that the task cuts into several records
  (pretrain/data/long_documents.py), which read_in_order needs to find the source's order across shards."""
  tf = tf_loader.tensorflow()
  long_texts = dataset.map(lambda ex: tf.cond(tf.strings.length(ex[text_key]) > MAX_DOCUMENT_BYTES,
                                              lambda: ex[text_key], lambda: tf.constant(b"")))
  records = (len(pieces(text)) if text else 1 for text in long_texts.as_numpy_iterator())
  return [[i, n] for i, n in enumerate(records) if n > 1]


def _finish(store_dir: str, source, split: str, vocabulary, count: int) -> None:
  """store.json, once every shard is complete; a finished store is never changed (its order is a run's)."""
  if os.path.exists(os.path.join(store_dir, META)):
    return
  shards = [os.path.join(store_dir, _shard_name(i, count)) for i in range(count)]
  if not all(os.path.exists(s + ".json") for s in shards):
    return
  counts = [json.loads(files.read_text(s + ".json")) for s in shards]
  meta = {"format": FORMAT, "source": source.identity(split), "vocabulary": vocabulary_digest(vocabulary),
          "dtype": _dtype(vocabulary).str, "shards": [os.path.basename(s) for s in shards],
          "documents": [c["documents"] for c in counts], "tokens": sum(c["tokens"] for c in counts),
          "unknown": sum(c["unknown"] for c in counts) if all("unknown" in c for c in counts) else None,
          "bytes": [c.get("bytes") for c in counts], "sha256": [c.get("sha256") for c in counts],
          "cut": [c.get("cut", []) for c in counts] if all("cut" in c for c in counts) else None,
          # What the curation stage removed from the source (counts per rule), if it went through one.
          "curation": source.curation.report()[split] if source.curation else None}
  files.write_atomically(os.path.join(store_dir, META), json.dumps(meta, indent=1).encode())


def _warn_unknown(meta: dict, what: str) -> None:
  """A line where more than 1 in 1,000 of a store's tokens are <unk>: text the vocabulary cannot spell (a user's
  model without byte fallback), which the model never reads or writes; stores built before the count say nothing."""
  unknown, tokens = meta.get("unknown") or 0, meta["tokens"]
  if tokens and unknown / tokens > 1e-3:
    log(f"warning: {unknown:,} of the {tokens:,} tokens of {what} ({unknown / tokens:.1%}) are <unk>: text the "
        "vocabulary cannot spell, which the model never reads or writes; use a vocabulary with byte fallback (the "
        "project's own, or SentencePiece's byte_fallback=True)")


class TokenStore:
  """Random access to a finished store's documents, as token arrays, by index."""

  def __init__(self, store_dir: str, vocabulary):
    meta_path = os.path.join(store_dir, META)
    if not os.path.exists(meta_path):
      raise UserError(f"{store_dir} is not a finished token store; build it with `pretrain prepare-data`")
    self.meta = _read_meta(meta_path)
    if self.meta["vocabulary"] != vocabulary_digest(vocabulary):
      raise UserError(f"the token store {store_dir} was built with another vocabulary; remove it, or build "
                      "the store of this run's vocabulary with `pretrain prepare-data`")
    _verify(store_dir, self.meta)
    self.directory = store_dir
    self.id = content_id(store_dir, self.meta)
    self.dtype = np.dtype(self.meta["dtype"])
    self.starts = np.cumsum([0] + self.meta["documents"])  # First global index of each shard, and the total.
    self._readers = [array_record_module.ArrayRecordReader(os.path.join(store_dir, s), READER_OPTIONS)
                     for s in self.meta["shards"]]
    self._lock = threading.Lock()  # Readers are shared by tf.data's threads.

  def __len__(self) -> int:
    return int(self.starts[-1])

  def read(self, indices) -> tuple[np.ndarray, np.ndarray]:
    """The documents at global `indices` (shard-major: shard 0's documents, then shard 1's, ...): their tokens
    concatenated, as int32, and their lengths."""
    indices = np.asarray(indices, np.int64)
    shard = np.searchsorted(self.starts, indices, side="right") - 1
    records = [None] * len(indices)
    with self._lock:
      for s in np.unique(shard):
        where = np.flatnonzero(shard == s)
        try:
          read = self._readers[s].read([int(indices[i] - self.starts[s]) for i in where])
        except Exception as e:  # pylint: disable=broad-except  (ArrayRecord's, e.g. a chunk hash mismatch)
          raise UserError(f"the token store {self.directory} cannot be read ({str(e).splitlines()[0]}); delete it "
                          "and rerun: it is built again") from None
        for i, record in zip(where, read):
          records[i] = record
    documents = [np.frombuffer(r, self.dtype) for r in records]
    return (np.concatenate(documents).astype(np.int32),
            np.array([len(d) for d in documents], np.int64))

  def read_in_order(self, positions) -> tuple[np.ndarray, np.ndarray]:
    """read() of the records at `positions` in the source's order (a long document's records in a row)."""
    return self.read(self._in_order(np.asarray(positions, np.int64)))

  def _in_order(self, positions: np.ndarray) -> np.ndarray:
    """The store indices of the records at `positions` in the source's order. Shard s of n holds the source's
    documents s, s + n, s + 2n, ... (build_shard), each one record but those the task cut into several (store.json's
    'cut': [index in the shard, records] of each)."""
    n = len(self._readers)
    if n == 1:
      return positions
    if self.meta.get("cut") is None:
      raise UserError(f"the token store {self.directory} of {n} shards was built before it recorded the documents "
                      "cut into pieces, which reading it in order (data.context=stream) needs; delete it and rerun "
                      "pretrain prepare-data: it is built again")
    (document, extra, first, before), per_shard = self._cut_tables
    source_document, piece = positions, np.zeros_like(positions)
    if len(document):
      j = np.maximum(np.searchsorted(first, positions, side="right") - 1, 0)  # The last cut one at or before.
      at_or_after = positions >= first[j]
      inside = at_or_after & (positions - first[j] <= extra[j])
      source_document = np.where(inside, document[j], positions - np.where(at_or_after, before[j + 1], 0))
      piece = np.where(inside, positions - first[j], 0)
    shard, local = source_document % n, source_document // n
    index = np.empty_like(positions)
    for s, (cut_local, extra_before) in enumerate(per_shard):  # Shard s's records before document `local`.
      mine = shard == s
      index[mine] = self.starts[s] + local[mine] + extra_before[np.searchsorted(cut_local, local[mine])] + piece[mine]
    return index

  @functools.cached_property
  def _cut_tables(self):
    """((the cut source documents, their extra records, the position of their first record, the extra records
    before each and in all), per shard (the index in it of its cut documents, the extra records before each))."""
    n, shards = len(self._readers), self.meta["cut"]
    cut = sorted((local * n + s, records - 1) for s, shard in enumerate(shards) for local, records in shard)
    document, extra = np.array([c[0] for c in cut], np.int64), np.array([c[1] for c in cut], np.int64)
    before = np.concatenate([[0], np.cumsum(extra)]).astype(np.int64)
    per_shard = [(np.array([local for local, _ in shard], np.int64),
                  np.concatenate([[0], np.cumsum([r - 1 for _, r in shard])]).astype(np.int64)) for shard in shards]
    return (document, extra, document + before[:-1], before), per_shard


def _read_meta(path: str) -> dict:
  try:
    meta = json.loads(files.read_bytes(path))
    if not isinstance(meta, dict) or not all(k in meta for k in ("vocabulary", "dtype", "shards", "documents")):
      raise ValueError("fields are missing")
  except ValueError as e:
    raise Damaged(f"{META} is not a store's ({e})") from None
  return meta


def _verify(store_dir: str, meta: dict) -> None:
  """Raises Damaged unless every shard is there with the size (and, up to VERIFY_BYTES, the digest) store.json
  records; a store written before they were recorded is checked for its shards only."""
  sizes, digests = meta.get("bytes") or [None] * len(meta["shards"]), meta.get("sha256") or [None] * len(meta["shards"])
  check_digests = sum(size or 0 for size in sizes) <= VERIFY_BYTES
  for shard, size, digest in zip(meta["shards"], sizes, digests):
    path = os.path.join(store_dir, shard)
    if not os.path.exists(path):
      raise Damaged(f"{shard} is missing")
    if size is not None and os.path.getsize(path) != size:
      raise Damaged(f"{shard} holds {os.path.getsize(path)} bytes, not {size}")
    if digest is not None and check_digests and _digest(path) != digest:
      raise Damaged(f"{shard}'s bytes changed since it was written")


def _still_damaged(store_dir: str) -> bool:
  """Whether the store is there and damaged (another process may have rebuilt it meanwhile)."""
  meta_path = os.path.join(store_dir, META)
  if not os.path.exists(meta_path):
    return False
  try:
    _verify(store_dir, _read_meta(meta_path))
  except Damaged:
    return True
  return False


def open_or_build(task, source, split: str, vocabulary, cache: str) -> TokenStore:
  """The store of `task`'s source and vocabulary, built first (one shard, with a progress bar) if missing, and
  built again if damaged (the damaged one moved aside)."""
  store_dir = directory(cache, source, split, vocabulary)
  for attempt in range(2):
    if not os.path.exists(os.path.join(store_dir, META)):
      log(f"Tokenizing the {split} split of {source.name} once into {store_dir} (reused by later runs)")
      build_shard(task, source, split, vocabulary, store_dir)
    try:
      store = TokenStore(store_dir, vocabulary)
      _warn_unknown(store.meta, f"the {split} split of {source.name}")
      return store
    except Damaged as e:
      if attempt:
        raise UserError(f"the token store {store_dir} was built again and is still damaged ({e}); check the disk "
                        "of the cache directory (data.cache_dir)") from None
      aside = f"{store_dir}.damaged-{uuid.uuid4().hex[:8]}"
      with data_cache.held(store_dir):  # Of several processes finding it damaged, one moves it aside.
        if _still_damaged(store_dir):
          os.rename(store_dir, aside)
          log(f"warning: the token store {store_dir} is damaged ({e}); moved aside to {aside} (delete it at "
              "will), building it again")
