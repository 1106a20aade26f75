"""Index-addressed training batches: a position in the stream is a few numbers, so a run resumes at any step in
constant time, with another batch size or another number of hosts.

Epoch e visits a token store's documents (pretrain/data/token_store.py) in a
seeded random order (tf.random.experimental.index_shuffle: no table, any
size). Window g of the endless sequence of epochs holds window_size(...)
consecutive documents of that order (about 512 rows' worth, at most 1024).
The task's objective (its seqio preprocessors after the cache placeholder)
and the family's packing run on one window at a time,
and the window's rows come out in a seeded random order. So the rows of window
g are a pure function of (seed, g), and a position is (window, rows of it
taken).

data.streams = S streams share the work: stream s reads windows s, s+S,
s+2S, ... and fills rows [s*B/S, (s+1)*B/S) of every global batch of B rows.
A host prepares only the streams its rows come from (every stream when S=1),
so the global batches are the same for any number of hosts, and each
stream's rows are the same for any batch size (a multiple of S).

A mixture or a schedule (pretrain/data/schedule.py) draws the member of each
stream's i-th row from (seed, stream, i) at the rates of the step that row
belongs to; each member keeps its own position. Members of different objectives
make rows of the run's model features (a causal-LM row beside prefix-LM rows
gets an all-causal decoder_causal_attention).

The position (the checkpoint's data item) holds, per stream, the rows taken
and each member's next (window, row): a few numbers, whatever the step.
"""

import copy

import jax
from jax.experimental import multihost_utils
import numpy as np

from pretrain.data import packing, schedule, token_store
from pretrain.system import errors, tf_loader
from pretrain.system.console import log
from pretrain.system.errors import UserError

tf = tf_loader.Lazy("tensorflow")

# A window's preparation has a fixed cost (its small tf.data pipeline), shared by its rows (tools/bench_data.md):
# a window holds documents of about WINDOW_ROWS rows' tokens, and at most WINDOW_DOCUMENTS of them.
WINDOW_ROWS = 512
WINDOW_DOCUMENTS = 1024
FOREVER = np.iinfo(np.int64).max
PARALLEL_WINDOWS = 4


def _seed(*parts) -> tf.Tensor:
  """A stateless-RNG seed pair from the run's seed and integers naming what is drawn."""
  a = 0
  for p in parts[:-1]:
    a = a * 1_000_003 + p
  return tf.stack([tf.constant(a, tf.int64), tf.cast(parts[-1], tf.int64)])


def window_size(store: token_store.TokenStore, lengths: dict) -> int:
  """Documents per window: as many as hold WINDOW_ROWS rows of the longest feature on average, at most
  WINDOW_DOCUMENTS (at least one)."""
  tokens = WINDOW_ROWS * max(lengths.values())
  return max(1, min(WINDOW_DOCUMENTS, tokens * len(store) // max(1, store.meta["tokens"])))


def window_documents(documents: int, size: int, seed: int, member: int, g, in_order: bool = False) -> tf.Tensor:
  """The store indices of window g's documents: the g-th `size` documents of the endless sequence of epochs, each
  epoch a seeded permutation of the store (member: which member of a mixture). `in_order` (a stream context): each
  epoch visits the source's consecutive runs of `size` documents in a seeded order instead, each run in the source's
  order (positions in it, which TokenStore.read_in_order reads), the runs starting a seeded number of documents
  (below `size`) further on each epoch, the last wrapping around to the first documents: the text is cut into rows
  at other places each epoch, not into the same rows."""
  g = tf.cast(g, tf.int64)
  per_epoch = -(-documents // size)
  epoch, k = g // per_epoch, g % per_epoch
  if in_order:
    k = tf.random.experimental.index_shuffle(k, seed=_seed(seed, member, epoch), max_index=per_epoch - 1)
    shift = tf.random.stateless_uniform([], _seed(seed, member, 2, epoch), 0, size, dtype=tf.int64)
    return (shift + tf.range(k * size, tf.minimum((k + 1) * size, documents), dtype=tf.int64)) % documents
  order = tf.range(k * size, tf.minimum((k + 1) * size, documents), dtype=tf.int64)
  return tf.random.experimental.index_shuffle(order, seed=_seed(seed, member, epoch), max_index=documents - 1)


def window_rows(task, store: token_store.TokenStore, converter, lengths: dict, seed: int, member: int,
                features: tuple[str, ...] = (), size: int = 0, in_order: bool = False):
  """fn(g) -> a dataset of one element: the packed rows of window g, stacked in a seeded order, each with its
  window, its index in that order and its member. `features`: the run's model features, of which those the
  member's converter does not make are zeros (a causal-LM row among prefix-LM rows). `size`: documents per window
  (0: window_size of `lengths`). `in_order`: the window's documents in the source's order (window_documents)."""

  size = size or window_size(store, lengths)

  def rows(g):
    ids = window_documents(len(store), size, seed, member, g, in_order)
    read = store.read_in_order if in_order else store.read  # A stream's text, whatever the store's shards.
    tokens, sizes = tf.numpy_function(read, [ids], [tf.int32, tf.int64], stateful=False)
    tokens = tf.reshape(tokens, [-1])
    texts = tf.RaggedTensor.from_row_lengths(tokens, tf.reshape(sizes, [-1]))
    dataset = task.preprocess_postcache(tf.data.Dataset.from_tensor_slices({"targets": texts}), lengths, seed)
    dataset = dataset.map(lambda ex: {k: v[:lengths[k]] if k in lengths else v for k, v in ex.items()})
    packed = converter(dataset, task_feature_lengths=lengths)
    # All the window's rows (each holds a token), in a seeded order. (padded_batch: batch() takes time in
    # proportion to its bound; the rows are of one shape, so nothing is padded.)
    stacked = packed.padded_batch(tf.size(tokens, tf.int64) + 1)

    def permute(rows):
      n = tf.shape(next(iter(rows.values())), out_type=tf.int64)[0]  # Features differ by family; rows do not.
      order = tf.random.experimental.index_shuffle(tf.range(n), seed=_seed(seed, member, 1, g), max_index=n - 1)
      shape = tf.shape(next(iter(rows.values())))
      missing = {k: tf.zeros(shape, tf.int32) for k in features if k not in rows}
      return {**{k: tf.gather(v, order) for k, v in rows.items()}, **missing, "window": tf.fill([n], g),
              "row": tf.range(n), "member": tf.fill([n], tf.constant(member, tf.int64))}

    return stacked.map(permute)

  return rows


def member_rows(rows_fn, stream: int, streams: int, start: tuple[int, int]) -> tf.data.Dataset:
  """The rows of one member in one stream, from position (window, row)."""
  window, row = start
  windows = tf.data.Dataset.range(window, FOREVER, streams)
  # Whole windows, in order, PARALLEL_WINDOWS prepared at once. (One element per window: interleave buffers up to
  # twice block_length elements of each, and a deleted pipeline's buffers fill with errors.)
  rows = windows.interleave(rows_fn, cycle_length=PARALLEL_WINDOWS, num_parallel_calls=PARALLEL_WINDOWS,
                            deterministic=True)
  return rows.unbatch().skip(row)


def member_choices(plan, seed: int, stream: int, first_row: int, first_step: int,
                   rows_per_step: int) -> tf.data.Dataset:
  """The member of each of a stream's rows from `first_row` on, drawn from (seed, stream, row index) at the rates
  of the schedule `plan` at the row's step: first_step + (row - first_row) // rows_per_step."""
  if plan.fixed:  # Today's mixture: one draw per row at fixed rates.
    rates = plan.rates[0]
    log_rates = tf.math.log([[r / sum(rates) for r in rates]])
    return tf.data.Dataset.range(first_row, FOREVER).map(
        lambda i: tf.random.stateless_categorical(log_rates, 1, _seed(seed, stream, i))[0, 0])
  starts = tf.constant(plan.steps, tf.float64)
  rates = tf.constant(plan.rates, tf.float64)
  rates = rates / tf.reduce_sum(rates, axis=1, keepdims=True)
  ramps = tf.constant(plan.ramps)
  last = len(plan.steps) - 1

  def draw(i):
    step = tf.cast(first_step + (i - first_row) // rows_per_step, tf.float64)
    k = tf.searchsorted(starts, step[None], side="right")[0] - 1
    after = tf.minimum(k + 1, last)
    t = tf.where(ramps[k], (step - starts[k]) / tf.maximum(starts[after] - starts[k], 1.0), 0.0)
    at_step = (1 - t) * rates[k] + t * rates[after]
    return tf.random.stateless_categorical(tf.math.log(at_step)[None], 1, _seed(seed, stream, i))[0, 0]

  return tf.data.Dataset.range(first_row, FOREVER).map(draw)


def stream_rows(members: list, plan, stream: int, streams: int, position: dict, seed: int, first_step: int,
                rows_per_step: int) -> tf.data.Dataset:
  """One stream's rows: its members' rows, mixed by a draw per row index (member_choices)."""
  datasets = [member_rows(fn, stream, streams, tuple(start)) for fn, start in zip(members, position["members"])]
  if len(datasets) == 1:
    return datasets[0]
  choices = member_choices(plan, seed, stream, position["rows"], first_step, rows_per_step)
  return tf.data.Dataset.choose_from_datasets(datasets, choices)


def start_position(task: str, seed: int, streams: int, stores: list[str], windows: list[int],
                   schedule: dict | None = None) -> dict:
  """The start of the stream; stores and windows: each member's token store and documents per window; schedule:
  a schedule's member tasks and stages ({"members": [...], "stages": text}), where it has more than one stage."""
  return {"pipeline": "indexed", "task": task, "seed": seed, "stores": stores, "windows": windows,
          **({"schedule": schedule} if schedule else {}),
          "streams": [{"rows": 0, "members": [[s, 0] for _ in stores]} for s in range(streams)]}


def resume_position(saved: dict, fresh: dict) -> dict:
  """Where to continue: the saved position, if it is one of this stream (else the start, saying why)."""
  if saved.get("pipeline") != "indexed":
    raise UserError("the latest checkpoint's data position counts examples to replay (data.pipeline=replay); "
                    "resume it with --config.data.pipeline=replay")
  if len(saved["streams"]) != len(fresh["streams"]):
    raise UserError(f"the run was written with data.streams={len(saved['streams'])}; resume it with "
                    f"--config.data.streams={len(saved['streams'])}")
  for key, what in (("task", "task"), ("seed", "train.seed"), ("stores", "tokenized data (its token stores)"),
                    ("windows", "documents per window (pretrain/data/indexed.py)")):
    if saved.get(key) != fresh[key]:
      log(f"The {what} changed since the checkpoint ({saved.get(key)} -> {fresh[key]}): reading the data from its "
          "start.")
      return fresh
  before, now = saved.get("schedule") or {}, fresh.get("schedule") or {}
  if before.get("members", now.get("members")) != now.get("members", before.get("members")):
    log(f"data.schedule's members changed since the checkpoint ({before['members']} -> {now['members']}): reading "
        "the data from its start.")
    return fresh
  if before.get("stages") != now.get("stages"):
    log(f"data.schedule changed since the checkpoint, from\n{before.get('stages', 'one stage')}\nto\n"
        f"{now.get('stages', 'one stage')}\nThe rows from this step on follow the new schedule; each member "
        "continues where it stood in its data.")
    saved = {**{k: v for k, v in saved.items() if k != "schedule"}, **({"schedule": now} if now else {})}
  return saved


class IndexedBatches:
  """This process's block of each global batch (`share`: Run.data_share), as numpy arrays; position() is where
  the stream stands after the batches taken so far (call it on every process: it gathers the streams each knows)."""

  def __init__(self, members: list, plan, vocabulary, family, lengths: dict[str, int], *, task: str,
               batch_size: int, streams: int, share, seed: int, cache: str, saved_position: dict | None = None,
               step: int = 0, report_members: bool = False, length_stages: tuple = ()):
    """members: (seqio task, source, its family's converter, its task lengths, whether its objective reads the
    documents in order: Objective.in_order) of each member of the schedule
    `plan` (pretrain/data/schedule.py); family and lengths: the run's; task: the run's task name; cache: the data
    cache holding the token stores; step: the run's step at saved_position. report_members: each batch also holds
    'member', the member of each row, shaped as the targets the loss reads (family.targets_and_weights).
    length_stages: data.length_schedule's stages (schedule.length_stages; none: the config's lengths); at a stage's
    first step every member starts its next window (the rest of a window begun at the old length is not read in
    this epoch), so the rows of a stage are a function of the position where it starts."""
    self._stages = length_stages or (schedule.LengthStage(0, 1, 1, batch_size),)
    if any(stage.rows % streams for stage in self._stages):
      raise UserError(f"train.batch_size={batch_size} does not split into data.streams={streams} streams; "
                      f"use a multiple of {streams}")
    self._family, self._report_members, self._plan, self._seed, self._share = family, report_members, plan, seed, \
        share
    self._members, self._features, self._streams, self._step = members, tuple(family.model_lengths(lengths)), \
        streams, step
    self._stores = [token_store.open_or_build(member_task, source, "train", vocabulary, cache)
                    for member_task, source, *_ in members]
    # Documents per window: of the config's lengths at every stage, so that a window is the same documents.
    self._windows = [window_size(store, member[3]) for store, member in zip(self._stores, members)]
    fresh = start_position(task, seed, streams, [s.id for s in self._stores],
                           self._windows, None if plan.fixed else {"members": [m[0].name for m in members],
                                                                   "stages": plan.describe()})
    if len(self._stages) > 1:
      fresh["length_stage"] = 0
    if saved_position and "stores" in saved_position:  # Named by directory before, by content now.
      saved_position = {**saved_position, "stores": [token_store.saved_id(cache, name)
                                                     for name in saved_position["stores"]]}
    self._position = copy.deepcopy(resume_position(saved_position, fresh) if saved_position else fresh)
    self._start_stage(schedule.stage_at(self._stages, step))

  def _start_stage(self, k: int) -> None:
    """Reads on at length stage k: from the next window of each member if the position is of another stage."""
    if self._position.get("length_stage", 0) != k:
      for stream in self._position["streams"]:
        stream["members"] = [[w + self._streams, 0] if r else [w, 0] for w, r in stream["members"]]
      self._position["length_stage"] = k
    stage, streams = self._stages[k], self._streams
    self._stage, self._per_stream = k, stage.rows // streams
    row_fns = [window_rows(member_task, store, packing.numpy_packing(converter), stage.scaled(member_lengths),
                           self._seed, member, self._features, size, in_order)
               for member, ((member_task, _, converter, member_lengths, in_order), store, size)
               in enumerate(zip(self._members, self._stores, self._windows))]
    # Rows [lo, hi) of the global batch are this process's; stream s fills [s * per_stream, (s + 1) * per_stream).
    blocks, block = self._share.count, self._share.index
    if stage.rows % blocks:
      raise UserError(f"train.batch_size={stage.rows} does not divide into the {blocks} blocks of rows that the "
                      "processes read; use a multiple of it")
    lo, hi = block * stage.rows // blocks, (block + 1) * stage.rows // blocks
    self._parts = []  # (stream, rows of its batch this host keeps, iterator)
    for s in range(streams):
      first, last = max(lo, s * self._per_stream), min(hi, (s + 1) * self._per_stream)
      if first < last:
        rows = stream_rows(row_fns, self._plan, s, streams, self._position["streams"][s], self._seed, self._step,
                           self._per_stream)
        dataset = rows.batch(self._per_stream, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
        self._parts.append((s, slice(first - s * self._per_stream, last - s * self._per_stream),
                            dataset.as_numpy_iterator()))

  def __iter__(self):
    return self

  def __next__(self) -> dict:
    k = schedule.stage_at(self._stages, self._step)
    if k != self._stage:
      self._start_stage(k)
    pieces = []
    for s, keep, iterator in self._parts:
      try:
        rows = next(iterator)
      except tf.errors.OpError as e:  # Raised in tf.data's threads (a store that cannot be read).
        raise errors.carried(e, "reading the training data") from None
      stream = self._position["streams"][s]
      stream["rows"] += self._per_stream
      for m in range(len(stream["members"])):
        taken = np.flatnonzero(rows["member"] == m)
        if len(taken):
          stream["members"][m] = [int(rows["window"][taken[-1]]), int(rows["row"][taken[-1]]) + 1]
      piece = {k: v[keep] for k, v in rows.items() if k not in ("window", "row", "member")}
      if self._report_members:
        targets = self._family.targets_and_weights(piece)[0]
        piece["member"] = np.broadcast_to(rows["member"][keep, None].astype(np.int32), targets.shape).copy()
      pieces.append(piece)
    self._step += 1
    return {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]}

  def continue_at(self, step: int) -> None:
    """The next batch is of model step `step` (a spike guard's rollback skips the batches of its bad window): the
    rows read so far stay read, and the data reads on past them as a run resumed there at `step` would, the
    schedule's draws and the length stage those of `step`, not of the batches read."""
    self._step = step
    self._start_stage(schedule.stage_at(self._stages, step))

  def position(self) -> dict:
    """The position after the batches taken so far, the same on every process."""
    if jax.process_count() == 1:
      return copy.deepcopy(self._position)  # The checkpoint writes it while the next steps run.
    known = {s for s, _, _ in self._parts}
    table = np.array([[st["rows"], *np.ravel(st["members"])] if s in known else [-1] * (1 + 2 * len(st["members"]))
                      for s, st in enumerate(self._position["streams"])], np.int32)
    table = np.max(multihost_utils.process_allgather(table), axis=0)  # Every stream is some host's.
    streams = [{"rows": int(r[0]), "members": r[1:].reshape(-1, 2).tolist()} for r in table]
    return {**copy.deepcopy(self._position), "streams": streams}
