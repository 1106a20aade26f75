"""Bad inputs and faults through the real command line, as a table.

Each case runs `pretrain ...` (pretrain.cli.main, as `python -m pretrain` calls
it) and must end with exit status 2 and one line `error: ...` as the last line
of stderr, naming the problem (the expected text), with no traceback anywhere;
where it runs on an existing run's workdir, that workdir is unchanged (its
listing and every file's checksum). The cases run in turn in one process
(tests/one_process.py), since most would spend their time importing.
"""

import hashlib
import os
import pathlib
import random
import resource
import shutil
import signal
import subprocess
import sys

import pytest

from pretrain.data import corpus
from tests import one_process
from tests.conftest import REPO, TINY

RUN = "{run}"  # A copy of a trained run's workdir, checked unchanged afterwards.
TMP = "{tmp}"  # The case's own empty directory.
DATA = "{data}"  # The bad data files written by _write_data.
CORPUS = f"pretrain_corpus:{corpus.PretrainCorpus.VERSION}"  # The prepared corpus, read as a user's TFDS dataset.
TRAIN = ["train", f"--workdir={TMP}/new", *TINY]
FILES = [*TRAIN, "--config.data.source=files"]

# (name, argv, what the last line says)
CASES = [
    # Config keys, values and files.
    ("unknown key", [*TRAIN, "--config.train.stepz=3"], "unknown config key 'train.stepz'; did you mean"),
    ("value of the wrong type", [*TRAIN, "--config.train.batch_size=many"], "is not a valid int"),
    ("override without a value", [*TRAIN, "--config.train.steps"], "has no value; write --config.train.steps=VALUE"),
    ("unknown flag", [*TRAIN, "--stepz=3"], "unknown arguments ['--stepz=3']"),
    ("zero steps", [*TRAIN, "--config.train.steps=0"], "train.steps must be positive, got 0"),
    ("zero heads", [*TRAIN, "--config.model.num_heads=0"], "model.num_heads must be positive, got 0"),
    ("negative kv heads", [*TRAIN, "--config.model.num_kv_heads=-1"], "model.num_kv_heads must be positive, got -1"),
    ("zero d_model", [*TRAIN, "--config.model.d_model=0"], "model.d_model must be positive, got 0"),
    ("negative layers", [*TRAIN, "--config.model.num_layers=-2"], "model.num_layers must be positive, got -2"),
    ("zero mlp_dim", [*TRAIN, "--config.model.mlp_dim=0"], "model.mlp_dim must be positive, got 0"),
    ("zero head_dim", [*TRAIN, "--config.model.head_dim=0"], "model.head_dim must be positive, got 0"),
    ("zero microbatches", [*TRAIN, "--config.train.microbatches=0"], "train.microbatches must be positive, got 0"),
    ("zero learning rate", [*TRAIN, "--config.optimizer.learning_rate=0"], "optimizer.learning_rate must be positive"),
    ("negative learning rate", [*TRAIN, "--config.optimizer.learning_rate=-0.001"],
     "optimizer.learning_rate must be positive, got -0.001"),
    ("keep no checkpoints", [*TRAIN, "--config.train.keep_checkpoints=0"], "train.keep_checkpoints must be positive"),
    ("unknown dtype", [*TRAIN, "--config.model.dtype=float64"], "model.dtype must be auto | float32 | bfloat16"),
    ("unknown source", [*TRAIN, "--config.data.source=s3"],
     "data.source must be corpus | files | tfds | ptb, got 's3'"),
    ("dropout of one", [*TRAIN, "--config.model.dropout=1.0"], "model.dropout must be in [0, 1), got 1.0"),
    ("adam b2 of one", [*TRAIN, "--config.optimizer.b2=1.0"], "optimizer.b2 must be in [0, 1), got 1.0"),
    ("unknown optimizer", [*TRAIN, "--config.optimizer.name=sgd"], "optimizer.name must be adamw | adafactor"),
    ("zero mesh axis", [*TRAIN, "--config.mesh.tensor=0"], "mesh.tensor must be positive, got 0"),
    ("backwards profile range", [*TRAIN, "--config.train.profile_steps=(5, 2)"], "train.profile_steps must be"),
    ("spike test without the guard", [*TRAIN, "--config.train.spike_test_batches=(3,)"],
     "train.spike_test_batches tests the loss-spike guard; set --config.train.spike_guard=True with it"),
    ("spike guard that keeps firing", [*TRAIN, "--config.train.spike_guard=True", "--config.train.spike_window=2",
                                       "--config.train.spike_threshold=50", "--config.train.spike_test_batches=(3,)",
                                       "--config.train.spike_max_rollbacks=0", "--config.train.steps=6"],
     "the loss-spike guard keeps firing: step 4 calls for rollback 1, beyond train.spike_max_rollbacks=0"),
    ("unregistered objective", [*TRAIN, "--config.data.objective=span_corruptoin"],
     "unknown objective 'span_corruptoin'; did you mean 'span_corruption'?"),
    ("objective of a missing module", [*TRAIN, "--config.data.objective=no_such_module:Denoiser"],
     "the objective 'no_such_module:Denoiser': the module 'no_such_module' cannot be imported"),
    ("an objective's setting out of range", [*TRAIN, "--config.data.objective=mlm", "--config.data.mlm_rate=1.5"],
     "data.mlm_rate must be in (0, 1), got 1.5"),
    ("an objective's setting on an objective that does not read it",
     [*TRAIN, "--config.data.objective=span_corruption", "--config.data.context=stream"],
     "data.context='stream' is read only by clm, which this config does not train or evaluate"),
    ("unknown built-in config", [*TRAIN, "--config=lm_125"], "--config='lm_125' is not a built-in config; did you "
     "mean 'lm_125m'?"),
    ("missing config file", [*TRAIN, "--config=/nonexistent/run.py"],
     "config file '/nonexistent/run.py' does not exist"),
    ("config file that raises", [*TRAIN, f"--config={DATA}/raises.py"], "raised KeyError: 'model' (--verbose shows"),
    ("config file with a syntax error", [*TRAIN, f"--config={DATA}/syntax.py"], "has a syntax error at line 2"),
    ("config file without get_config", [*TRAIN, f"--config={DATA}/empty.py"], "defines no get_config()"),
    ("gin file as the config", [*TRAIN, "--config=configs/gin/lm_125m.gin"],
     "--config=configs/gin/lm_125m.gin is a gin file; pass it with --gin_file=configs/gin/lm_125m.gin"),
    ("a config.json that is not a run's as the config", [*TRAIN, f"--config={DATA}/config.json"],
     "config.json is not a run's config (it has no model, data, train sections); give the config.json a run wrote"),
    ("config file that is not Python", [*TRAIN, f"--config={DATA}/two.txt"], "two.txt' is not a Python file"),
    ("missing gin file", [*TRAIN, "--gin_file=/nonexistent/run.gin"], "/nonexistent/run.gin"),
    ("unknown gin key", [*TRAIN, "--gin.train.stepz=3"], "unknown config key 'train.stepz'"),
    # Numbers the libraries cannot take, and structured flags of the wrong shape (all of their kind).
    ("seed beyond 64 bits", [*TRAIN, "--config.train.seed=18446744073709551616"],
     "train.seed must be in [0, 2^63 - 1 = 9223372036854775807], got 18446744073709551616"),
    ("generate's seed beyond 64 bits", ["generate", f"--workdir={RUN}", "--prompt=x", "--seed=18446744073709551616"],
     "argument --seed: give at least 0 and at most 9223372036854775807"),
    ("profile steps of one number", [*TRAIN, "--config.train.profile_steps=5"],
     "train.profile_steps must be () or (start, stop) with 0 <= start < stop, got (5,)"),
    ("profile steps not a tuple", [*TRAIN, "--config.train.profile_steps=5 to 7"],
     "--config.train.profile_steps='5 to 7' is not a valid tuple; give a value like () or, as the field's help "
     "says: (start, stop)"),
    ("schedule of one number", [*TRAIN, "--config.data.schedule=5"],
     "data.schedule=(5,) is invalid; write ((from_step, members), ...)"),
    ("schedule of bare numbers", [*TRAIN, "--config.data.schedule=(0, 1)"],
     "data.schedule=(0, 1) is invalid; write ((from_step, members), ...)"),
    ("schedule members of bare names", [*TRAIN, "--config.data.schedule=((0, ('clm',)),)"],
     "data.schedule's members from step 0=('clm',) is invalid; write ((objective, rate)"),
    ("length schedule of bare numbers", [*TRAIN, "--config.data.length_schedule=(64,)"],
     "data.length_schedule=(64,) is invalid; write ((from_step, row length), ...)"),
    ("mixture of bare names", [*TRAIN, "--config.data.mixture=('corpus',)"],
     "data.mixture=('corpus',) is invalid; write ((source, files glob or TFDS name, rate), ...)"),
    ("mixture rate that is text", [*TRAIN, "--config.data.mixture=(('corpus', '', 'half'),)"],
     "data.mixture row ('corpus', '', 'half') is invalid"),
    ("mixture rates that sum to zero", [*TRAIN, "--config.data.mixture=(('corpus', '', 0.0), ('corpus', '', 0))"],
     "data.mixture's rates sum to 0"),
    ("mixture row whose glob matches nothing",
     [*TRAIN, f"--config.data.mixture=(('corpus', '', 1.0), ('files', '{DATA}/none/*.txt', 1.0))"],
     "none/*.txt' is read as data.train_files, so change the row: data.train_files="),
    ("eval objectives of an unknown name", [*TRAIN, "--config.data.eval_objectives=fim,clmm"],
     "clmm"),
    ("a user's objective whose preprocessing raises", [*TRAIN, f"--config.data.objective={DATA}/raising_objective.py:"
     "ReverseSpan", "--config.data.inputs_length=32", "--config.data.targets_length=32"],
     "its preprocess raised ValueError: no span here at "),
    # Rules between fields, refused with the config (pretrain/config/rules.py): muP where it is not defined, shapes
    # that do not divide, an evaluation the model cannot take; `pretrain config` refuses them as train does.
    ("T5 with tied embeddings",
     [*TRAIN, "--config.data.objective=span_corruption", "--config.model.tie_embeddings=True"],
     "model.tie_embeddings=True: the encoder-decoder's output projection is its own"),
    ("import from a bucket", [*TRAIN, "--config.train.init_from_hf=gs://bucket/llama"],
     "'gs://bucket/llama' is not a local directory: a Hugging Face import reads local files"),
    ("muP with tied embeddings", [*TRAIN, "--config.model.parameterization=mup", "--config.model.tie_embeddings=True"],
     "model.parameterization=mup needs untied embeddings"),
    ("muP with Adafactor", [*TRAIN, "--config.model.parameterization=mup", "--config.optimizer.name=adafactor"],
     "model.parameterization=mup is defined for optimizer.name=adamw or muon"),
    ("config of muP with Adafactor", ["config", "--config.model.parameterization=mup",
                                      "--config.optimizer.name=adafactor"],
     "model.parameterization=mup is defined for"),
    ("heads not divisible by kv heads", [*TRAIN, "--config.model.num_heads=3"], "num_kv_heads"),
    ("batch not divisible by microbatches", [*TRAIN, "--config.train.microbatches=3"], "microbatches"),
    ("lm-eval's tasks in an MLM run", [*TRAIN, "--config.data.objective=mlm",
                                       "--config.train.harness_tasks=('pretrain_cloze',)"],
     "train.harness_tasks runs lm-eval's tasks, which score text with a language model; an encoder-only run has none"),
    ("a model that cannot fit", [*TRAIN, "--config.data.seq_len=10000000"], "GiB per device"),
    # Data.
    ("files that match nothing", [*FILES, "--config.data.train_files=/nonexistent/*.txt"], "matches no files"),
    ("files given as their directory", [*FILES, f"--config.data.train_files={DATA}"],
     "matches no files: it names a directory; give its files, e.g."),
    ("files given as a comma-separated list",
     [*FILES, f"--config.data.train_files={DATA}/letters.txt,{DATA}/raises.py"],
     "matches no files: it is one glob, its commas part of a name; give a glob that matches every file"),
    ("empty files", [*FILES, f"--config.data.train_files={DATA}/empty/*.txt"], "every matching file is empty"),
    ("validation files of blank lines", [*FILES, f"--config.data.train_files={DATA}/letters.txt",
                                         f"--config.data.validation_files={DATA}/blank.txt"],
     "blank.txt' holds no documents (its 1 files have only blank lines"),
    ("a held-out share without documents", [*FILES, f"--config.data.train_files={DATA}/two.txt",
                                            f"--config.tokenizer.path={RUN}/spm.model"],
     "the validation split of files_clm yields no examples; add documents to it"),
    # SentencePiece's limit counts pieces; the fix is in tokenizer.vocab_size's terms (sentinels too).
    ("text too short for a vocabulary", [*FILES, f"--config.data.train_files={DATA}/two.txt"],
     "<= 288.); give more text: it makes 288 pieces, too few for the smallest tokenizer.vocab_size, 396"),
    ("JSONL line that is not JSON", [*FILES, f"--config.data.train_files={DATA}/not_json.jsonl"],
     "not_json.jsonl:2: the record is not JSON"),
    ("JSONL record without the text field", [*FILES, f"--config.data.train_files={DATA}/no_text.jsonl"],
     "no_text.jsonl:3: the record has no field 'text'"),
    ("JSONL text that is null", [*FILES, f"--config.data.train_files={DATA}/null.jsonl"],
     "null.jsonl:2: the record holds null in 'text'"),
    ("JSONL text that is a number", [*FILES, f"--config.data.train_files={DATA}/number.jsonl"],
     "number.jsonl:2: the record holds int in 'text'"),
    ("JSONL text that is a list", [*FILES, f"--config.data.train_files={DATA}/list.jsonl"],
     "list.jsonl:2: the record holds list in 'text'"),
    ("text that is not UTF-8", [*FILES, f"--config.data.train_files={DATA}/latin1.txt"],
     "latin1.txt:2: the record is not UTF-8"),
    ("binary file given as text", [*FILES, f"--config.data.train_files={DATA}/binary.txt"],
     "a binary file given as text"),
    ("JSONL without the configured field", [*FILES, f"--config.data.train_files={DATA}/no_text.jsonl",
                                            "--config.data.text_key=body"], "records have no field 'body'"),
    # Every file's records, not only the first file's (its advice was data.bad_records=skip: all of the file).
    ("a second JSONL file naming its text otherwise", [*FILES, f"--config.data.train_files={DATA}/named/*.jsonl"],
     "b.jsonl: records have no field 'text' (fields: ['content']); set --config.data.text_key"),
    ("unknown filter", [*TRAIN, "--config.data.filters=gopher,wordz"],
     "data.filters: unknown filter 'wordz' (did you mean 'words'?)"),
    ("filter threshold out of range", [*TRAIN, "--config.data.filters=alphabetic_words=1.5"],
     "'alphabetic_words=1.5': thresholds out of range"),
    ("dedup threshold above one", [*TRAIN, "--config.data.dedup=near", "--config.data.dedup_threshold=1.5"],
     "data.dedup_threshold must be in (0, 1], got 1.5"),
    ("unknown TFDS dataset", [*TRAIN, "--config.data.source=tfds", "--config.data.tfds_name=no_such_dataset:1.0.0"],
     "TFDS dataset 'no_such_dataset:1.0.0' is unknown"),
    ("missing vocabulary", [*TRAIN, "--config.tokenizer.path=/nonexistent/spm.model"],
     "vocabulary file '/nonexistent/spm.model' does not exist"),
    ("vocabulary that is not SentencePiece", [*TRAIN, f"--config.tokenizer.path={DATA}/raises.py"],
     "is neither a SentencePiece model nor a tokenizer.json"),
    ("too few sentinels for the spans", [*TRAIN, "--config.data.objective=span_corruption",
                                         "--config.tokenizer.extra_ids=2"],
     "makes up to 7 spans, but the vocabulary has 2 sentinels; raise tokenizer.extra_ids to 7 or more"),
    ("vocabulary too small", [*TRAIN, "--config.tokenizer.vocab_size=200"],
     "tokenizer.vocab_size=200 is too small: give at least 396"),
    # Fields the tokenizer's kind does not read, set: refused, as an objective's unread setting is.
    ("vocabulary size of a fixed-size kind", [*TRAIN, "--config.tokenizer.kind=bytes",
                                              "--config.tokenizer.vocab_size=1000"],
     "tokenizer.vocab_size=1000 is not read by tokenizer.kind=bytes, whose size is fixed"),
    ("SentencePiece's model type for another kind", [*TRAIN, "--config.tokenizer.kind=byte_bpe",
                                                     "--config.tokenizer.model_type=bpe"],
     "tokenizer.model_type='bpe' is SentencePiece's, not read by tokenizer.kind=byte_bpe"),
    # Workdirs and runs.
    ("workdir under a file", ["train", f"--workdir={DATA}/raises.py/run", *TINY], "cannot be written"),
    ("resume with another width", ["train", f"--workdir={RUN}", *TINY, "--config.model.d_model=48"],
     "model.d_model=32, not 48"),
    ("resume with another family", ["train", f"--workdir={RUN}", *TINY, "--config.data.objective=span_corruption"],
     "a decoder-only model (objective 'clm'), which data.objective='span_corruption' cannot continue; resume it with "
     "the config it trained with (its config.json), or use a new --workdir"),
    ("resume past its steps", ["train", f"--workdir={RUN}", *TINY, "--config.train.steps=1"],
     "train.steps=1 ends before the checkpoint of step 2"),
    # The run's own copy of its vocabulary is named: the settings that learned it learn another from other data.
    ("resume on another source's vocabulary", ["train", f"--workdir={RUN}", *TINY, "--config.data.source=files",
                                               f"--config.data.train_files={DATA}/letters.txt"],
     "differs where the data changed (its files, or the data.* fields); resume with the run's own vocabulary, "
     "which its workdir keeps: --config.tokenizer.path="),
    ("resume without clipping", ["train", f"--workdir={RUN}", *TINY, "--config.optimizer.grad_clip=0"],
     "optimizer.grad_clip=1.0, not 0.0: one of them is 0"),
    ("export over a written directory", ["export", f"--workdir={RUN}", f"--out={RUN}"],
     "exists and is not an empty directory; give a new directory"),
    ("export in shards of no size", ["export", f"--workdir={RUN}", f"--out={TMP}/hf", "--max_shard_size=5XB"],
     "'5XB' is not a size: give a number and KB, MB, GB or TB"),
    ("export to a bucket", ["export", f"--workdir={RUN}", "--out=gs://bucket/model"],
     "--out=gs://bucket/model is a URL: the export writes a local directory"),
    ("eval of no run", ["eval", f"--workdir={TMP}/none", "--task=corpus_clm"], "holds no run (no config.json)"),
    ("eval of an unknown task", ["eval", f"--workdir={RUN}", "--task=corpus_nope"],
     "--task='corpus_nope' is not a task"),
    ("eval of zero batches", ["eval", f"--workdir={RUN}", "--task=corpus_clm", "--batches=0"], "argument --batches: give at least 1, not 0"),
    ("eval with a stride past its window", ["eval", f"--workdir={RUN}", "--task=corpus_clm", "--window=8",
                                            "--stride=9"], "--stride=9 leaves tokens unscored: at most --window=8"),
    ("generate from no run", ["generate", f"--workdir={TMP}/none", "--prompt=a"], "holds no run (no config.json)"),
    ("generate with an empty prompt", ["generate", f"--workdir={RUN}", "--prompt="], "--prompt is empty"),
    ("generate at a negative temperature", ["generate", f"--workdir={RUN}", "--prompt=a", "--temperature=-1"],
     "argument --temperature: give at least 0 (0: greedy), not -1.0"),
    ("generate at a temperature of nan", ["generate", f"--workdir={RUN}", "--prompt=a", "--temperature=nan"],
     "argument --temperature: 'nan' is not a finite number"),
    ("generate with top_p of zero", ["generate", f"--workdir={RUN}", "--prompt=a", "--top_p=0"],
     "argument --top_p: give a mass in (0, 1]"),
    ("export into a file", ["export", f"--workdir={RUN}", f"--out={DATA}/raises.py"],
     "raises.py' is a file, not a directory"),
    ("prepare for the replay pipeline", ["prepare-data", *TINY, "--config.data.pipeline=replay"],
     "data.pipeline=replay reads its examples through seqio as it trains, not from a token store"),
    ("inspect a negative number", ["inspect-task", "--task=corpus_clm", "--num=-1"], "argument --num: give at least 1, not -1"),
    ("unknown subcommand", ["trian"], "unknown subcommand 'trian'; did you mean 'train'?"),
    # A workdir's files edited or damaged (each case's DAMAGE, before the snapshot), and settings that would
    # leave an objective nothing to learn, refused before any work.
    ("config.json that is not JSON", ["eval", f"--workdir={RUN}", "--task=corpus_clm"],
     "config.json is not a run's config"),
    ("config.json with a value of the wrong type", ["generate", f"--workdir={RUN}", "--prompt=a"],
     "model.d_model is 'abc', not a int"),
    ("checkpoints that are a file", ["train", f"--workdir={TMP}/taken", *TINY], "checkpoints is not a directory"),
    ("resume with another optimizer", ["train", f"--workdir={RUN}", *TINY, "--config.optimizer.name=adafactor"],
     "optimizer.name='adamw', not 'adafactor'"),
    ("pairs too short to mask a token", [*TRAIN, "--config.data.objective=nsp", "--config.data.seq_len=4"],
     "MLM would learn nothing; raise data.seq_len by 2"),
    ("gin files that include each other", [*TRAIN, f"--gin_file={DATA}/loop_a.gin"],
     "gin files include each other"),
    ("inspect a length of zero", ["inspect-task", "--task=corpus_clm", "--targets_length=0"],
     "argument --targets_length: give at least 1, not 0"),
    ("data cache that is a file", [*TRAIN, f"--config.data.cache_dir={DATA}/raises.py"],
     "raises.py cannot be used (it is a file); set data.cache_dir to a writable directory"),
    ("TFDS split file cut short", [*TRAIN, "--config.data.source=tfds", f"--config.data.tfds_name={CORPUS}",
                                   f"--config.data.tfds_data_dir={TMP}/tfds"],
     f"TFDS dataset '{CORPUS}' is damaged: the train split's files hold"),
    ("UL2 targets too short for its X-denoisers", [*TRAIN, "--config.data.objective=ul2",
                                                   "--config.data.targets_length=40"], "X-denoiser"),
    ("UL2 denoiser whose span length is text", [*TRAIN, "--config.data.objective=ul2",
                                                "--config.data.ul2_denoisers=(('R', 'x', 0.15, 1.0),)"],
     "data.ul2_denoisers row ('R', 'x', 0.15, 1.0) is invalid"),
    ("streams that do not divide the batch", [*TRAIN, "--config.data.streams=3"],
     "train.batch_size=4 does not split into data.streams=3 streams"),
    ("split name of a source that has its own", [*TRAIN, "--config.data.validation_split=test"],
     "data.validation_split='test': only a TFDS source reads the split names, and this run's (corpus) has its own"),
    ("sentence pairs from Penn Treebank's one-sentence lines", [*TRAIN, "--config=ptb_small",
                                                                 "--config.data.objective=sop"],
     "of the first 200 documents of the source hold two sentences (ending in . ! or ?), fewer than half"),
]


def _cut_json(path: pathlib.Path) -> None:
  path.write_text(path.read_text()[:40])


def _wrong_type(path: pathlib.Path) -> None:
  path.write_text(path.read_text().replace('"d_model": 32', '"d_model": "abc"'))


def _cut_tfds_train(cache: pathlib.Path, tmp: pathlib.Path) -> None:
  """A copy of the prepared corpus as a user's TFDS dataset, its train file cut short."""
  shutil.copytree(cache / "tfds" / "pretrain_corpus", tmp / "tfds" / "pretrain_corpus")
  version = str(corpus.PretrainCorpus.VERSION)
  train = tmp / "tfds" / "pretrain_corpus" / version / "pretrain_corpus-train.tfrecord-00000-of-00001"
  os.truncate(train, train.stat().st_size // 2)


def _file_for_checkpoints(tmp: pathlib.Path) -> None:
  (tmp / "taken").mkdir()
  (tmp / "taken" / "checkpoints").write_text("")


# Objectives' settings and rules between fields: refused with the config, before the workdir is made.
REFUSED_BEFORE_ANY_WORK = {"unregistered objective", "an objective's setting out of range",
                           "pairs too short to mask a token", "UL2 targets too short for its X-denoisers",
                           "UL2 denoiser whose span length is text", "streams that do not divide the batch",
                           "muP with tied embeddings", "muP with Adafactor", "heads not divisible by kv heads",
                           "batch not divisible by microbatches", "lm-eval's tasks in an MLM run",
                           "vocabulary too small"}
# name: what damages the case's run copy or directory first.
DAMAGE = {"config.json that is not JSON": lambda run, tmp, cache: _cut_json(run / "config.json"),
          "config.json with a value of the wrong type": lambda run, tmp, cache: _wrong_type(run / "config.json"),
          "checkpoints that are a file": lambda run, tmp, cache: _file_for_checkpoints(tmp),
          "TFDS split file cut short": lambda run, tmp, cache: _cut_tfds_train(pathlib.Path(cache), tmp)}


def _write_data(data: pathlib.Path) -> None:
  good = '{"text": "A document of plain words."}\n'
  (data / "empty").mkdir(parents=True)
  (data / "empty" / "a.txt").write_text("")
  (data / "blank.txt").write_text("\n \n\n")
  # Two documents that the files source's held-out 5% (a hash of the text) both leaves in the train split.
  (data / "two.txt").write_text("first of two short documents here\nthe second of the two short documents\n")
  (data / "not_json.jsonl").write_text(good + "{not json\n")
  (data / "no_text.jsonl").write_text(good + good + '{"body": "words"}\n')
  (data / "named").mkdir()
  (data / "named" / "a.jsonl").write_text(good)
  (data / "named" / "b.jsonl").write_text('{"content": "words"}\n')
  (data / "null.jsonl").write_text(good + '{"text": null}\n')
  (data / "number.jsonl").write_text(good + '{"text": 3}\n')
  (data / "list.jsonl").write_text(good + '{"text": ["a", "b"]}\n')
  (data / "latin1.txt").write_bytes(b"plain words\ncaf\xe9 au lait\n")
  (data / "binary.txt").write_bytes(b"plain words\n\x00\x01\x02\x00binary\n")
  (data / "raises.py").write_text("def get_config():\n  return {}['model']\n")
  (data / "syntax.py").write_text("def get_config():\n  return (\n")
  (data / "empty.py").write_text("x = 1\n")
  (data / "config.json").write_text("{}\n")
  letters = random.Random(0)  # Text enough for the quickstart's 4096 pieces, none of them the corpus's vocabulary.
  (data / "letters.txt").write_text("\n".join(" ".join("".join(letters.choices("abcdefghij", k=letters.randint(2, 7)))
                                                      for _ in range(12)) for _ in range(4000)))
  (data / "loop_a.gin").write_text("include 'loop_b.gin'\n")
  (data / "loop_b.gin").write_text("include 'loop_a.gin'\n")
  from tests.objectives.test_user_objective import guide_objective  # pylint: disable=g-import-not-at-top
  (data / "raising_objective.py").write_text(guide_objective().replace(
      '      tokens = example["targets"]\n', '      tokens = example["targets"]\n      raise ValueError("no span here")\n', 1))


def _snapshot(directory: pathlib.Path) -> dict[str, str]:
  """Every file under `directory` and its SHA-256 (the listing and the contents)."""
  return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
          for p in sorted(directory.rglob("*"))}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory, cache_dir, run_train):
  """Runs every case in turn in one process; {name: ((status, stdout, stderr), snapshot before, after, its dir)}."""
  root = tmp_path_factory.mktemp("bad_inputs")
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # As a user runs it.
  env["PRETRAIN_CACHE"] = cache_dir
  trained = root / "trained"
  first = run_train(trained, "--config.train.steps=2")  # The cases' run to resume, in this process.
  assert first.returncode == 0, first.stderr
  data = root / "data"
  _write_data(data)

  commands, directories = [], {}
  for i, (name, argv, _) in enumerate(CASES):
    tmp = root / f"case{i}"
    tmp.mkdir()
    run = tmp / "run"
    shutil.copytree(trained, run)
    DAMAGE.get(name, lambda run, tmp, cache: None)(run, tmp, cache_dir)
    directories[name] = tmp, _snapshot(run)
    commands.append([a.replace(RUN, str(run)).replace(TMP, str(tmp)).replace(DATA, str(data)) for a in argv])
  results = one_process.run(commands, root / "commands", env, REPO)
  return {name: (result, directories[name][1], _snapshot(directories[name][0] / "run"), directories[name][0])
          for (name, _, _), result in zip(CASES, results)}


def test_the_table_holds_forty_cases():
  assert len(CASES) >= 40 and len({name for name, _, _ in CASES}) == len(CASES)


@pytest.mark.slow
@pytest.mark.parametrize("name, argv, expected", CASES, ids=[c[0] for c in CASES])
def test_one_clear_line_and_nothing_changed(outcomes, name, argv, expected):
  (code, _, stderr), before, after, tmp = outcomes[name]
  assert code == 2, stderr[-3000:]
  assert "Traceback" not in stderr, stderr[-3000:]
  last = stderr.strip().splitlines()[-1]
  assert last.startswith("error: ") and expected in last, stderr[-3000:]
  assert after == before  # The run's workdir, where the case used one: same files, same bytes.
  if name in REFUSED_BEFORE_ANY_WORK:
    assert not (tmp / "new").exists()


# Faults while a run writes: a full disk, a failed write.
TINY_RUN = [*TINY, "--config.train.steps=8", "--config.train.checkpoint_every=2", "--config.train.keep_checkpoints=5",
            "--config.train.eval_every=100", "--config.sample.num=0"]


def _can_mount_tmpfs() -> bool:
  return shutil.which("unshare") is not None and subprocess.run(
      ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="no user namespace to mount a small tmpfs in")
@pytest.mark.slow
def test_a_full_data_cache_ends_in_one_line(tmp_path):
  """The data cache on a 1 MiB filesystem: the bundled corpus's TFDS split does not fit (a token store that does
  not fit fails the same way: both are built by data_cache.build_once)."""
  cache = tmp_path / "cache"
  cache.mkdir()
  train = " ".join([sys.executable, "-m", "pretrain", "train", f"--workdir={tmp_path}/run", *TINY_RUN])
  script = (f"mount -t tmpfs -o size=1m tmpfs {cache} && cd {REPO} && "
            f"{{ {train} > {tmp_path}/out 2> {tmp_path}/err; echo $? > {tmp_path}/rc; }}")
  subprocess.run(["unshare", "-rm", "sh", "-c", script], env={**os.environ, "PRETRAIN_CACHE": str(cache)},
                 timeout=900, check=True)
  err = (tmp_path / "err").read_text()
  assert (tmp_path / "rc").read_text().strip() == "2" and "Traceback" not in err, err[-3000:]
  last = err.strip().splitlines()[-1]
  assert last.startswith(f"error: the data cache's disk is full: writing {cache}/tfds/pretrain_corpus failed (") and \
      "No space left on device" in last and "set data.cache_dir (or $PRETRAIN_CACHE) to a disk with room" in last


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="no user namespace to mount a small tmpfs in; "
                    "test_a_failed_checkpoint_write_leaves_no_partial_step simulates the failure instead")
@pytest.mark.slow
def test_a_full_disk_refuses_the_save_and_the_run_resumes_once_there_is_space(tmp_path, cache_dir, vocabulary):
  """A 5 MiB filesystem holds two checkpoints of the tiny model (2.1 MiB each), not three."""
  del vocabulary
  disk, run = tmp_path / "disk", tmp_path / "disk" / "run"
  disk.mkdir()
  train = " ".join([sys.executable, "-m", "pretrain", "train", f"--workdir={run}", *TINY_RUN])
  script = (f"mount -t tmpfs -o size=5m tmpfs {disk} && cd {REPO} && "
            f"{{ {train} > {tmp_path}/full.out 2> {tmp_path}/full.err; echo $? > {tmp_path}/full.rc; }}; "
            f"find {run} > {tmp_path}/listing; mount -o remount,size=40m {disk} && "
            f"{{ {train} > {tmp_path}/rerun.out 2> {tmp_path}/rerun.err; echo $? > {tmp_path}/rerun.rc; }}")
  subprocess.run(["unshare", "-rm", "sh", "-c", script], env={**os.environ, "PRETRAIN_CACHE": cache_dir}, timeout=900,
                 check=True)
  full_err = (tmp_path / "full.err").read_text()
  assert (tmp_path / "full.rc").read_text().strip() == "2", full_err
  assert "Traceback" not in full_err
  last = full_err.strip().splitlines()[-1]
  assert last.startswith(f"error: not enough free space in {run}/checkpoints for the checkpoint of step 6"), last
  assert "the checkpoint of step 4 is intact" in last, last
  assert f"free space (the run resumes from the newest checkpoint; the older {run}/checkpoints/2 may go)" in last, last
  listing = (tmp_path / "listing").read_text()
  assert "checkpoints/4/pretrain_checksums.json" in listing and "checkpoints/6" not in listing
  assert "tmp" not in listing.replace(str(tmp_path), "")  # No partial step, no metrics.jsonl.tmp-*.
  rerun = (tmp_path / "rerun.out").read_text() + (tmp_path / "rerun.err").read_text()
  assert (tmp_path / "rerun.rc").read_text().strip() == "0", rerun
  assert "Resuming from the checkpoint at step 4" in rerun


@pytest.mark.slow
def test_a_failed_checkpoint_write_leaves_no_partial_step(tmp_path, cache_dir, vocabulary):
  """Files over 300 KiB cannot be written (RLIMIT_FSIZE): every save fails as it would on a disk that filled up after
  the free-space check, or on a lost mount."""
  del vocabulary
  run = tmp_path / "run"

  def limit_file_size():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # A write past the limit then fails (EFBIG), not the process.
    resource.setrlimit(resource.RLIMIT_FSIZE, (300 << 10, 300 << 10))

  result = subprocess.run([sys.executable, "-m", "pretrain", "train", f"--workdir={run}", *TINY_RUN], cwd=REPO,
                          env={**os.environ, "PRETRAIN_CACHE": cache_dir}, capture_output=True, text=True,
                          timeout=600, preexec_fn=limit_file_size)
  assert result.returncode == 2, result.stderr[-3000:]
  # Orbax and asyncio log the failure from their own threads too, also as the process exits (left as it is).
  assert (f"\nerror: the checkpoint of step 2 could not be written to {run}/checkpoints (File too large); no "
          "checkpoint had been written; fix the cause (free space, permissions, the mount), then rerun to "
          "resume\n") in result.stderr, result.stderr[-3000:]
  assert sorted(p.name for p in (run / "checkpoints").iterdir()) == []  # No partial step left behind.
  assert not list(run.glob("*.tmp-*"))
