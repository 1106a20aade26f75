"""The run config's schema: every core field declared once, with its default, its valid values, a line of help
and, for a field added after runs were first written, the value that a saved config without it reads as (older).

From it: the quickstart's config (defaults(): configs/quickstart.py is these defaults, and every zoo config the
quickstart with overrides), the checks of config.validate (ranges()), the fields an old config.json gains
(newer_fields()), and the table of `pretrain config --fields` and docs/config.md. The objectives declare their own
settings the same way (Setting is Field; pretrain/objectives/). Adding a field is one line here.
"""

import dataclasses

import ml_collections


class Valid:
  """The values a field may take: `test` of the value, and `what` says them, e.g. 'positive'."""

  def __init__(self, test, what: str):
    self.test, self.what = test, what


POSITIVE = Valid(lambda v: v > 0, "positive")
NOT_NEGATIVE = Valid(lambda v: v >= 0, "at least 0")
FRACTION = Valid(lambda v: 0 <= v <= 1, "in [0, 1]")
OPEN_FRACTION = Valid(lambda v: 0 < v < 1, "in (0, 1)")
BELOW_ONE = Valid(lambda v: 0 <= v < 1, "in [0, 1)")
MAX_SEED = 2**63 - 1  # JAX's keys and TensorFlow's seeds take a signed 64-bit integer.
SEED = Valid(lambda v: 0 <= v <= MAX_SEED, f"in [0, 2^63 - 1 = {MAX_SEED}]")


def one_of(*names: str) -> Valid:
  return Valid(lambda v: v in names, " | ".join(names))


_ALWAYS = object()  # A field every config has had.


@dataclasses.dataclass(frozen=True)
class Field:
  """A config field: its default, its valid values (None: any value of the default's type, or checked where it is
  used), one line of help, and the value a saved config from before the field existed reads as."""
  default: object
  valid: Valid | None = None
  help: str = ""
  older: object = _ALWAYS


def _vocab_kinds() -> Valid:
  from pretrain import vocab  # pylint: disable=g-import-not-at-top  (the registry of kinds)
  return one_of(*vocab.KINDS)


# The sections and fields of a run's config, in the order of the quickstart.
SCHEMA = {
    "data": {
        "source": Field("corpus", one_of("corpus", "files", "tfds", "ptb"), "corpus | files | tfds | ptb (the Penn "
                                                                          "Treebank: the ptb extra)"),
        "objective": Field("clm", None, "Decoder-only: clm | fim | prefix_lm_decoder | ul2_decoder. Encoder-decoder: "
                                        "span_corruption | prefix_lm | ul2 | bart | mass. Encoder-only: mlm | nsp | "
                                        "sop (MLM plus next-sentence / sentence-order prediction) | electra | "
                                        "contrastive (SimCSE; needs model.dropout > 0). Or one of your own: "
                                        "MODULE:CLASS or FILE.py:CLASS. Each objective's settings (data.noise_density, "
                                        "data.mlm_rate, ...) are declared, with their defaults, in its module "
                                        "(pretrain/objectives/); `pretrain inspect-task --list` shows them."),
        "train_files": Field("", None, "source=files: glob of .txt (a document per line) or .jsonl files"),
        "validation_files": Field("", None, "source=files: glob; empty holds out 5% of the train documents"),
        "text_key": Field("text", None, "JSONL field or TFDS feature holding the text"),
        "bad_records": Field("error", one_of("error", "skip"), "files: a record that is not text (or not JSON with "
                                                               "text_key) stops the run naming its file and line "
                                                               "(error), or is left out and counted (skip)"),
        "text_documents": Field("line", one_of("line", "paragraph", "file"),
            'files: what a document of a .txt file is: a "line", a "paragraph" (lines up to a blank line: hard-wrapped '
            'text, books, man pages) or the whole "file". JSONL files hold one document per record.', older='line'),
        "filters": Field("", None, "Document quality filters, comma-separated: presets gopher and c4, rule names (with "
                                   "thresholds: words=20:5000), your own rules (file.py:function, True to keep). "
                                   "`pretrain inspect-data` shows what they remove.", older=''),
        "dedup": Field("", Valid(lambda v: v in ("", "exact", "near"), "'' (none), exact or near"),
            '"" | exact (normalised text) | near (also MinHash, Jaccard >= dedup_threshold)', older=''),
        "dedup_threshold": Field(0.8, Valid(lambda v: 0 < v <= 1, "in (0, 1]"), "", older=0.8),
        "tfds_name": Field("", None, "source=tfds: NAME:VERSION, e.g. c4/en:3.1.0"),
        "tfds_data_dir": Field("", None, "source=tfds: where the prepared dataset is ('' = TFDS default)"),
        "train_split": Field("train", None, ""),
        "validation_split": Field("validation", None, ""),
        "seq_len": Field(128, Valid(lambda v: v >= 2, "at least 2"), "clm, fim, mlm: tokens per row"),
        "inputs_length": Field(128, POSITIVE, "other objectives: inputs tokens (a decoder-only row holds inputs + "
                                              "targets)"),
        "targets_length": Field(128, POSITIVE, ""),
        "eval_objectives": Field((), None, "More objectives evaluated (on the validation split, every train.eval_every "
                                           "steps) beside data.objective, of the same model family and rows "
                                           'within the trained ones, e.g. ("prefix_lm_decoder", "fim") for clm with '
                                           "inputs_length + targets_length = seq_len; metrics eval/TASK/loss, ..."),
        "mixture": Field((), None, "Several sources mixed at rates: rows of (corpus | files | tfds | ptb, files glob "
                                   'or TFDS NAME:VERSION, rate), e.g. (("corpus", "", 1.0), '
                                   '("files", "data/*.jsonl", 3.0)). Empty: data.source alone.'),
        "schedule": Field((), None, "A curriculum: the mixture as a function of the step (pretrain/data/schedule.py, "
                                    'docs/guide/objectives.md "Curricula"), stages (from_step, members) or '
                                    '(from_step, members, "ramp"), a member (objective, rate) over data.source or '
                                    "(objective, source, files glob or TFDS NAME:VERSION, rate); data.objective names "
                                    "the member whose model trains. "
                                    'E.g. ((0, (("clm", 1.0),)), (800, (("ul2_decoder", 1.0),))). Empty: '
                                    "data.objective alone.", older=()),
        "length_schedule": Field((), None, "Sequence-length warmup: ((from_step, row length), ...) ending at the "
                                           "config's row, e.g. ((0, 32), (100, 64), (200, 128)) for data.seq_len=128; "
                                           "each length divides the row. length_warmup: what a shorter row keeps, "
                                           '"tokens" (more rows: train.batch_size x full / length) or "rows" '
                                           "(train.batch_size rows). Empty: no warmup.", older=()),
        "length_warmup": Field("tokens", one_of("tokens", "rows"), "", older='tokens'),
        "pipeline": Field("indexed", one_of("indexed", "replay"), "How training reads: indexed (documents tokenized "
                                                                  "once into a token store; a checkpoint records a "
                                                                  "position of a few numbers, so resuming takes "
                                                                  "constant time) | replay (the seqio stream; resuming "
                                                                  "passes over every example read before, in time that "
                                                                  "grows with the step)."),
        "streams": Field(1, POSITIVE, "indexed: independent streams that share each batch (a multiple of it); a host "
                                      "prepares only the streams its rows come from, so set it to the number of hosts "
                                      "(or a multiple) for multi-host runs. Fixed for a run."),
        "host_sharding": Field("source", one_of("source", "examples"), "replay and evaluation, multi-host: source "
                                                                       "(each host prepares its shard of the "
                                                                       "documents) | examples (each host prepares "
                                                                       "everything and keeps every n-th example: the "
                                                                       "same global batches for any number of hosts; "
                                                                       "data.context=stream always reads so, to keep "
                                                                       "the text in order)."),
        "task": Field("", None, "Your own seqio Task or Mixture, trained on instead of data.source's (data.objective "
                                "still chooses the model family, whose features the task must give): its name, and the "
                                "module or .py file whose import registers it. Its preprocessors are its own, so it is "
                                "read with data.pipeline=replay."),
        "task_module": Field("", None, ""),
        "cache_dir": Field("", None, "corpus and tokenizers ('' = $PRETRAIN_CACHE or ~/.cache/pretrain)"),
    },
    "tokenizer": {
        "path": Field("", None, "an existing .model (SentencePiece) or tokenizer .json; '' trains one on the train "
                                "split"),
        "kind": Field("sentencepiece", _vocab_kinds(),
            "the tokenizer kind: a module each in pretrain/vocab/, registered in vocab.KINDS", older='sentencepiece'),
        "vocab_size": Field(4096, POSITIVE, "including the sentinels"),
        "extra_ids": Field(100, NOT_NEGATIVE, "sentinels <extra_id_N>; UL2 at long inputs needs more (spans ~ inputs / "
                                              "4)"),
        "model_type": Field("unigram", one_of("unigram", "bpe", "char", "word"), "SentencePiece's: unigram or bpe"),
        "max_chars": Field(20_000_000, POSITIVE, "text to train on, from the start of the train split"),
    },
    "model": {
        "d_model": Field(256, POSITIVE, ""),
        "num_layers": Field(4, POSITIVE, ""),
        "num_heads": Field(4, POSITIVE, ""),
        "num_kv_heads": Field(4, POSITIVE, ""),
        "head_dim": Field(64, POSITIVE, ""),
        "mlp_dim": Field(768, POSITIVE, ""),
        "rope_theta": Field(10000.0, POSITIVE, ""),
        "norm_eps": Field(1e-6, POSITIVE,
            "RMSNorm's epsilon, decoder-only (Llama 2 and Mixtral checkpoints use 1e-5)", older=1e-06),
        "tie_embeddings": Field(False, None, ""),
        "parameterization": Field("standard", one_of("standard", "mup"),
            "standard | mup (the maximal-update parameterization: the best learning rate holds across widths; "
            "pretrain/models/mup.py)", older="standard"),
        "mup_base_width": Field(256, POSITIVE, "muP: the d_model at which the model equals the standard one (where "
                                               "its learning rate was tuned)", older=256),
        "mup_base_head_dim": Field(0, NOT_NEGATIVE, "muP: the head_dim at the base width (0: model.head_dim, the "
                                                   "width growing by heads)", older=0),
        "dtype": Field("auto", one_of("auto", "float32", "bfloat16", "float16"), "activations: auto (bfloat16 on "
                                                                                 "GPU/TPU, float32 on CPU) | float32 | "
                                                                                 "bfloat16"),
        "param_dtype": Field("float32", one_of("float32", "bfloat16"), "parameters and optimizer moments: float32 | "
                                                                       "bfloat16 (half the memory)"),
        "scan_layers": Field(False, None, "one nn.scan over the layers (faster compiles for deep models)"),
        "remat": Field("none", one_of("none", "full", "save_dots"), "none | full | save_dots (recompute activations to "
                                                                    "save memory)"),
        "attention": Field("auto", one_of("auto", "xla", "splash", "gpu_flash"), "auto (splash on TPU, gpu_flash on "
                                                                                 "GPU, xla on CPU) | xla | splash | "
                                                                                 "gpu_flash", older='auto'),
        "feed_forward": Field("gated", one_of("gated", "relu"),
            "The feed-forward layers (and experts): gated (SwiGLU; T5: gated GELU, T5 v1.1) | relu (T5 only: plain "
            "ReLU as T5 v1.0 and the Switch Transformer; exports as SwitchTransformers when it has experts).",
            older="gated"),
        "dropout": Field(0.0, BELOW_ONE, "in training, on embeddings and residual branches (T5 used 0.1 when "
                                         "fine-tuning)"),
        "vocab_size": Field(0, Valid(lambda v: v >= 0, "at least 0 (0: the tokenizer's size rounded up to 128)"),
            "embedding rows; 0: the tokenizer's size rounded up to a multiple of 128"),
        "moe_experts": Field(0, Valid(lambda v: v == 0 or v >= 2, "0 (dense) or at least 2"),
            "Mixture of experts (pretrain/models/moe.py): every moe_every-th feed-forward layer is moe_experts experts "
            "of width moe_mlp_dim (0: mlp_dim), each token routed to its moe_top_k; 0 experts: dense.", older=0),
        "moe_top_k": Field(2, POSITIVE, "", older=2),
        "moe_every": Field(1, POSITIVE, "Switch Transformer: 2 (every other layer)", older=1),
        "moe_capacity_factor": Field(0.0, Valid(lambda v: v >= 0, "at least 0 (0: dropless)"),
            "0: dropless (grouped matmuls); > 0: capacity per expert, overflow dropped", older=0.0),
        "moe_mlp_dim": Field(0, Valid(lambda v: v >= 0, "at least 0 (0: model.mlp_dim)"), "", older=0),
        "moe_shared_mlp_dim": Field(0, NOT_NEGATIVE, "> 0: a gated shared expert of this width every token passes "
                                                     "(Qwen-MoE)", older=0),
        "moe_router_jitter": Field(0.0, BELOW_ONE,
            "Switch's multiplicative router-input noise in training (e.g. 0.01)", older=0.0),
        "moe_normalize_top_k": Field(True, None,
            "the k routing weights sum to 1 (Mixtral); False: raw (Switch top-1)", older=True),
        "moe_grouped_matmul": Field("auto", one_of("auto", "ragged_dot", "blocks"), "The dropless dispatch's grouped "
                                                                                    "matmuls: ragged_dot "
                                                                                    "(jax.lax.ragged_dot: grouped "
                                                                                    "kernels on GPUs and TPUs), blocks "
                                                                                    "(blocks of one expert's rows: "
                                                                                    "XLA:CPU's ragged_dot does E times "
                                                                                    "the work), auto: blocks on CPUs "
                                                                                    "only.", older='auto'),
        "num_decoder_layers": Field(0, Valid(lambda v: v >= 0, "at least 0 (0: as many as model.num_layers)"),
            "Encoder-decoder (T5 v1.1) only; the objective chooses the family. 0: as many as num_layers"),
        "relative_attention_num_buckets": Field(32, POSITIVE, ""),
        "relative_attention_max_distance": Field(128, POSITIVE, ""),
    },
    "optimizer": {
        "name": Field("adamw", one_of("adamw", "adafactor", "muon"), "adamw | adafactor (T5's: factored, decay 0.8, "
                                                                     "update clipping 1, no momentum) | muon (hidden "
                                                                     "matrices orthogonalised, the rest AdamW)"),
        "schedule": Field("cosine", one_of("cosine", "rsqrt", "wsd"), "cosine (warmup, then cosine decay) | rsqrt (T5: "
                                                                      "constant, then 1/sqrt(step)) | wsd (warmup, "
                                                                      "constant, then a decay over the last steps)"),
        "learning_rate": Field(3e-3, POSITIVE, "the peak"),
        "warmup_steps": Field(40, NOT_NEGATIVE, ""),
        "end_lr_ratio": Field(0.1, FRACTION, "what cosine and wsd decay to, a fraction of learning_rate"),
        "decay_steps": Field(0, NOT_NEGATIVE, "wsd: the decay's steps, at the end of the run (0: decay_fraction of "
                                              "train.steps)", older=0),
        "decay_fraction": Field(0.2, Valid(lambda v: 0 < v <= 1, "in (0, 1]"), "wsd: the decay's share of "
                                "train.steps, rounded (when decay_steps is 0)", older=0.2),
        "decay_shape": Field("1-sqrt", one_of("1-sqrt", "linear", "cosine"), "wsd's decay: end + (peak - end) x (1 - "
                             "sqrt(tau)) | linear | cosine, tau the share of the decay done", older="1-sqrt"),
        "weight_decay": Field(0.1, NOT_NEGATIVE, ""),
        "b1": Field(0.9, BELOW_ONE, ""),
        "b2": Field(0.95, BELOW_ONE, ""),
        "eps": Field(1e-8, POSITIVE, "AdamW's epsilon, added to the root of the second moment", older=1e-8),
        "muon_momentum": Field(0.95, BELOW_ONE, "Muon's (Nesterov) momentum on the hidden matrices", older=0.95),
        "muon_dtype": Field("bfloat16", one_of("bfloat16", "float32"), "the dtype Muon's Newton-Schulz iterations "
                            "run in: bfloat16 as the reference implementations (the momentum and the update stay "
                            "float32) | float32", older="float32"),
        "grad_clip": Field(1.0, Valid(lambda v: v >= 0, "at least 0 (0: no clipping)"), ""),
    },
    "loss": {
        "z_loss": Field(1e-4, NOT_NEGATIVE, "z_loss * logsumexp(logits)^2 per token, as T5X"),
        "label_smoothing": Field(0.0, BELOW_ONE, ""),
        "moe_load_balance": Field(0.01, NOT_NEGATIVE, "weight of MoE load-balancing loss (Switch), mean over MoE "
                                                      "layers", older=0.01),
        "moe_z_loss": Field(0.001, NOT_NEGATIVE, "weight of the MoE router z-loss (ST-MoE)", older=0.001),
        "normalizing_factor": Field(0.0, Valid(lambda v: v >= 0, "at least 0 (0: the mean over target tokens)"),
            "0: mean over target tokens; else divide the summed loss by this (T5X)"),
    },
    "train": {
        "steps": Field(300, POSITIVE, ""),
        "batch_size": Field(16, POSITIVE, "sequences per step, over all hosts"),
        "microbatches": Field(1, POSITIVE, "gradient accumulation: the batch is processed in this many pieces"),
        "seed": Field(0, SEED, ""),
        "log_every": Field(10, POSITIVE, ""),
        "eval_every": Field(50, POSITIVE, ""),
        "eval_batches": Field(8, POSITIVE, ""),
        "checkpoint_every": Field(100, POSITIVE, ""),
        "keep_checkpoints": Field(2, POSITIVE, ""),
        "keep_steps": Field((), None, "steps whose checkpoints are also saved and never deleted, e.g. (2000, 4000): "
                                      "the points that cooldown branches start from", older=()),
        "checkpoint_every_minutes": Field(0.0, NOT_NEGATIVE, "also save when this many minutes passed since the last "
                                                             "save (checked at logged steps), so a preemption loses "
                                                             "at most that long (0: off)", older=0.0),
        "profile_steps": Field((), None, "(start, stop): a jax.profiler trace of those steps into WORKDIR/profile"),
        "spike_guard": Field(False, None, "skip a step whose loss or gradient norm spikes; roll back to an earlier "
                                          "checkpoint, past the data of the bad window, when spikes repeat "
                                          "(pretrain/train/spike_guard.py)", older=False),
        "spike_window": Field(100, POSITIVE, "applied steps behind the guard's running mean and deviation (an "
                                             "exponential average); it judges from that many on", older=100),
        "spike_threshold": Field(6.0, POSITIVE, "a spike: more than this many running deviations (each at least 1% "
                                                "of the mean) above the running mean", older=6.0),
        "spike_rollback_after": Field(3, POSITIVE, "spiked steps in a row that roll back; a loss spike right after "
                                                   "an applied step rolls back at once", older=3),
        "spike_max_rollbacks": Field(3, NOT_NEGATIVE, "rollbacks before the run stops with an error", older=3),
        "spike_lr_factor": Field(1.0, Valid(lambda v: 0 < v <= 1, "in (0, 1]"),
                                 "after a rollback the learning rate is multiplied by this for spike_lr_steps steps",
                                 older=1.0),
        "spike_lr_steps": Field(0, NOT_NEGATIVE, "", older=0),
        "spike_test_batches": Field((), None, "a test of the guard: data batches (counted from the run's start, "
                                              "skipped ones included) whose loss is multiplied by 100", older=()),
        "harness_tasks": Field((), None,
            "lm-evaluation-harness tasks run on the current parameters during training (the eval extra; e.g. "
            "('pretrain_pairs_swap', 'pretrain_documents'): pretrain lm-eval's), logged as harness/TASK/METRIC",
            older=()),
        "harness_every": Field(0, NOT_NEGATIVE, "steps between the harness evaluations (0: train.eval_every)",
                               older=0),
        "harness_limit": Field(0, NOT_NEGATIVE, "documents of each harness task (0: all)", older=0),
        "harness_mode": Field("", None, "a UL2 run's mode token before each context of the harness tasks, e.g. "
                                        "'[S2S]' (pretrain lm-eval --mode's; '': none)", older=""),
        "init_from_hf": Field("", None, "A local Hugging Face directory (Llama, Mistral, Mixtral, Qwen2-MoE, T5 "
                                        "v1.1 or Switch Transformers) to start from: its model shape and tokenizer "
                                        "replace the model and tokenizer sections, its weights the random "
                                        "initialisation."),
        "parent": Field("", None, "a cooldown branch's parent: the workdir whose checkpoint of parent_step it "
                                  "continues (set by pretrain cooldown)", older=""),
        "parent_step": Field(0, NOT_NEGATIVE, "", older=0),
    },
    "mesh": {
        "data": Field(-1, Valid(lambda v: v == -1 or v > 0, "positive, or -1 (the devices left by the other axes)"),
            "-1 takes the devices left by the other axes"),
        "fsdp": Field(1, POSITIVE, ""),
        "tensor": Field(1, POSITIVE, ""),
        "expert": Field(1, POSITIVE, "MoE experts split over this axis (the batch too)", older=1),
        "context": Field(1, POSITIVE, "Context parallelism: each row's positions split over this axis (long "
                                      "sequences); attention gathers the row's keys and values", older=1),
        "stage": Field(1, POSITIVE, "Pipeline parallelism: the decoder-only model's scanned layers split into this "
                                    "many stages, the batch into train.microbatches microbatches flowing through "
                                    "them", older=1),
        "stage_repeats": Field(1, POSITIVE, "Chunks of layers per pipeline stage: 1 is GPipe's schedule, more a "
                                            "circular one (each microbatch passes the stages this many times; a "
                                            "smaller bubble, more hand-offs)", older=1),
        "dcn_data": Field(1, POSITIVE, "Multi-slice TPU runs: how much of each axis spans slices (DCN); the rest is "
                                       "within a slice (ICI)."),
        "dcn_fsdp": Field(1, POSITIVE, ""),
        "dcn_tensor": Field(1, POSITIVE, ""),
        "dcn_expert": Field(1, POSITIVE, "", older=1),
        "dcn_context": Field(1, POSITIVE, "", older=1),
        "dcn_stage": Field(1, POSITIVE, "", older=1),
        "rules": Field("fsdp_tensor", None, "Logical axis names -> mesh axes: a preset of parallel/mesh.py "
                                            "(fsdp_tensor | t5x | data_parallel) or explicit pairs, e.g. "
                                            '(("activation_batch", ("data", "fsdp")), ("embed", "fsdp"), ("mlp", '
                                            '"tensor"), ...).'),
    },
    "sample": {
        "num": Field(3, NOT_NEGATIVE, "samples printed at the end of the run"),
        "prompt_tokens": Field(12, POSITIVE, "taken from the start of validation documents"),
        "max_new_tokens": Field(40, POSITIVE, ""),
        "temperature": Field(0.7, Valid(lambda v: v >= 0, "at least 0 (0: greedy)"), "0 is greedy"),
    },
}


def fields():
  """(dotted key, Field) of every core field."""
  return [(f"{section}.{name}", field) for section, entries in SCHEMA.items() for name, field in entries.items()]


def defaults() -> ml_collections.ConfigDict:
  """A config holding every core field at its default."""
  cfg = ml_collections.ConfigDict()
  for section, entries in SCHEMA.items():
    cfg[section] = ml_collections.ConfigDict({name: field.default for name, field in entries.items()})
  return cfg


def ranges() -> dict[str, Valid]:
  """{dotted key: its valid values} of the fields that declare them."""
  return {key: field.valid for key, field in fields() if field.valid is not None}


def newer_fields() -> dict[str, object]:
  """{dotted key: the value an older config reads as} of the fields added after runs were first written."""
  return {key: field.older for key, field in fields() if field.older is not _ALWAYS}
