"""Quickstart: a small decoder-only causal LM on the bundled corpus, on a CPU.

Sized for a 2-core laptop: 5.5M parameters, 300 steps of 16 x 128
tokens, finishing in a few minutes. Every field can be overridden on the
command line, e.g. --config.train.steps=1000.
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()

  c.data = ml_collections.ConfigDict()
  c.data.source = "corpus"        # corpus | files | tfds
  # Decoder-only: clm | fim | prefix_lm_decoder | ul2_decoder. Encoder-decoder: span_corruption | prefix_lm |
  # ul2 | bart. Encoder-only: mlm | nsp | sop (MLM plus next-sentence / sentence-order prediction) | electra |
  # contrastive (SimCSE; needs model.dropout > 0). Or one of your own: MODULE:CLASS or FILE.py:CLASS. Each
  # objective's settings (data.noise_density, data.mlm_rate, ...) are declared, with their defaults, in its
  # module (pretrain/objectives/); `pretrain inspect-task --list` shows them.
  c.data.objective = "clm"
  c.data.train_files = ""         # source=files: glob of .txt (a document per line) or .jsonl files
  c.data.validation_files = ""    # source=files: glob; empty holds out 5% of the train documents
  c.data.text_key = "text"        # JSONL field or TFDS feature holding the text
  c.data.bad_records = "error"    # files: a record that is not text (or not JSON with text_key) stops the run
  # files: what a document of a .txt file is: a "line", a "paragraph" (lines up to a blank line: hard-wrapped
  # text, books, man pages) or the whole "file". JSONL files hold one document per record.
  c.data.text_documents = "line"
                                  # naming its file and line (error), or is left out and counted (skip)
  # Document quality filters, comma-separated: presets gopher and c4, rule names (with thresholds: words=20:5000),
  # your own rules (file.py:function, True to keep). `pretrain inspect-data` shows what they remove.
  c.data.filters = ""
  c.data.dedup = ""               # "" | exact (normalised text) | near (also MinHash, Jaccard >= dedup_threshold)
  c.data.dedup_threshold = 0.8
  c.data.tfds_name = ""           # source=tfds: NAME:VERSION, e.g. c4/en:3.1.0
  c.data.tfds_data_dir = ""       # source=tfds: where the prepared dataset is ('' = TFDS default)
  c.data.train_split = "train"
  c.data.validation_split = "validation"
  c.data.seq_len = 128            # clm, fim, mlm: tokens per row
  c.data.inputs_length = 128      # other objectives: inputs tokens (a decoder-only row holds inputs + targets)
  c.data.targets_length = 128
  # More objectives evaluated (on the validation split, every train.eval_every steps) beside data.objective,
  # of the same model family, e.g. ("prefix_lm_decoder", "fim") for clm; metrics eval/TASK/loss, ...
  c.data.eval_objectives = ()
  # Several sources mixed at rates: rows of (corpus | files | tfds, files glob or TFDS NAME:VERSION, rate),
  # e.g. (("corpus", "", 1.0), ("files", "data/*.jsonl", 3.0)). Empty: data.source alone.
  c.data.mixture = ()
  # A curriculum: the mixture as a function of the step (pretrain/data/schedule.py, README "Curricula"), stages
  # (from_step, members) or (from_step, members, "ramp"), a member (objective, rate) over data.source or
  # (objective, source, files glob or TFDS NAME:VERSION, rate); data.objective names the member whose model
  # trains. E.g. ((0, (("clm", 1.0),)), (800, (("ul2_decoder", 1.0),))). Empty: data.objective alone.
  c.data.schedule = ()
  # Sequence-length warmup: ((from_step, row length), ...) ending at the config's row, e.g. ((0, 32), (100, 64),
  # (200, 128)) for data.seq_len=128; each length divides the row. length_warmup: what a shorter row keeps,
  # "tokens" (more rows: train.batch_size x full / length) or "rows" (train.batch_size rows). Empty: no warmup.
  c.data.length_schedule = ()
  c.data.length_warmup = "tokens"
  # How training reads: indexed (documents tokenized once into a token store; a checkpoint records a position
  # of a few numbers, so resuming takes constant time) | replay (the seqio stream; resuming passes over every
  # example read before, in time that grows with the step).
  c.data.pipeline = "indexed"
  # indexed: independent streams that share each batch (a multiple of it); a host prepares only the streams
  # its rows come from, so set it to the number of hosts (or a multiple) for multi-host runs. Fixed for a run.
  c.data.streams = 1
  # replay, multi-host: source (each host prepares its shard of the documents) | examples (each host prepares
  # everything and keeps every n-th example: the same global batches for any number of hosts).
  c.data.host_sharding = "source"
  # Your own seqio Task or Mixture, trained on instead of data.source's (data.objective still chooses the model
  # family, whose features the task must give): its name, and the module or .py file whose import registers it.
  # Its preprocessors are its own, so it is read with data.pipeline=replay.
  c.data.task = ""
  c.data.task_module = ""
  c.data.cache_dir = ""           # corpus and tokenizers ('' = $PRETRAIN_CACHE or ~/.cache/pretrain)

  c.tokenizer = ml_collections.ConfigDict()
  c.tokenizer.path = ""           # an existing .model (SentencePiece) or tokenizer .json; '' trains one on the train split
  c.tokenizer.kind = "sentencepiece"  # or wordpiece, byte_bpe, bytes (pretrain/data/tokenizers_vocab.py)
  c.tokenizer.vocab_size = 4096   # including the sentinels
  c.tokenizer.extra_ids = 100     # sentinels <extra_id_N>; UL2 at long inputs needs more (spans ~ inputs / 4)
  c.tokenizer.model_type = "unigram"  # SentencePiece's: unigram or bpe
  c.tokenizer.max_chars = 20_000_000  # text to train on, from the start of the train split

  c.model = ml_collections.ConfigDict()
  c.model.d_model = 256
  c.model.num_layers = 4
  c.model.num_heads = 4
  c.model.num_kv_heads = 4
  c.model.head_dim = 64
  c.model.mlp_dim = 768
  c.model.rope_theta = 10000.0
  c.model.norm_eps = 1e-6         # RMSNorm's epsilon, decoder-only (Llama 2 and Mixtral checkpoints use 1e-5)
  c.model.tie_embeddings = False
  c.model.dtype = "auto"          # activations: auto (bfloat16 on GPU/TPU, float32 on CPU) | float32 | bfloat16
  c.model.param_dtype = "float32"  # parameters and optimizer moments: float32 | bfloat16 (half the memory)
  c.model.scan_layers = False     # one nn.scan over the layers (faster compiles for deep models)
  c.model.remat = "none"          # none | full | save_dots (recompute activations to save memory)
  c.model.attention = "auto"      # auto (splash on TPU, gpu_flash on GPU, xla on CPU) | xla | splash | gpu_flash
  # The feed-forward layers (and experts): gated (SwiGLU; T5: gated GELU, T5 v1.1) | relu (T5 only: plain ReLU as
  # T5 v1.0 and the Switch Transformer; exports as SwitchTransformers when it has experts).
  c.model.feed_forward = "gated"
  c.model.dropout = 0.0           # in training, on embeddings and residual branches (T5 used 0.1 when fine-tuning)
  c.model.vocab_size = 0          # embedding rows; 0: the tokenizer's size rounded up to a multiple of 128
  # Mixture of experts (pretrain/models/moe.py): every moe_every-th feed-forward layer is moe_experts experts of
  # width moe_mlp_dim (0: mlp_dim), each token routed to its moe_top_k; 0 experts: dense.
  c.model.moe_experts = 0
  c.model.moe_top_k = 2
  c.model.moe_every = 1           # Switch Transformer: 2 (every other layer)
  c.model.moe_capacity_factor = 0.0  # 0: dropless (grouped matmuls); > 0: capacity per expert, overflow dropped
  c.model.moe_mlp_dim = 0
  c.model.moe_shared_mlp_dim = 0  # > 0: a gated shared expert of this width every token passes (Qwen-MoE)
  c.model.moe_router_jitter = 0.0  # Switch's multiplicative router-input noise in training (e.g. 0.01)
  c.model.moe_normalize_top_k = True  # the k routing weights sum to 1 (Mixtral); False: raw (Switch top-1)
  # The dropless dispatch's grouped matmuls: ragged_dot (jax.lax.ragged_dot: grouped kernels on GPUs and TPUs),
  # blocks (blocks of one expert's rows: XLA:CPU's ragged_dot does E times the work), auto: blocks on CPUs only.
  c.model.moe_grouped_matmul = "auto"
  # Encoder-decoder (T5 v1.1) only; the objective chooses the family.
  c.model.num_decoder_layers = 0  # 0: as many as num_layers
  c.model.relative_attention_num_buckets = 32
  c.model.relative_attention_max_distance = 128

  c.optimizer = ml_collections.ConfigDict()
  c.optimizer.name = "adamw"      # adamw | adafactor (T5's: factored, decay 0.8, update clipping 1, no momentum)
  c.optimizer.schedule = "cosine"  # cosine (warmup, then cosine decay) | rsqrt (T5: constant, then 1/sqrt(step))
  c.optimizer.learning_rate = 3e-3  # the peak
  c.optimizer.warmup_steps = 40
  c.optimizer.end_lr_ratio = 0.1
  c.optimizer.weight_decay = 0.1
  c.optimizer.b1 = 0.9
  c.optimizer.b2 = 0.95
  c.optimizer.grad_clip = 1.0

  c.loss = ml_collections.ConfigDict()
  c.loss.z_loss = 1e-4            # z_loss * logsumexp(logits)^2 per token, as T5X
  c.loss.label_smoothing = 0.0
  c.loss.moe_load_balance = 0.01  # weight of MoE load-balancing loss (Switch), mean over MoE layers
  c.loss.moe_z_loss = 0.001       # weight of the MoE router z-loss (ST-MoE)
  c.loss.normalizing_factor = 0.0  # 0: mean over target tokens; else divide the summed loss by this (T5X)

  c.train = ml_collections.ConfigDict()
  c.train.steps = 300
  c.train.batch_size = 16         # sequences per step, over all hosts
  c.train.microbatches = 1        # gradient accumulation: the batch is processed in this many pieces
  c.train.seed = 0
  c.train.log_every = 10
  c.train.eval_every = 50
  c.train.eval_batches = 8
  c.train.checkpoint_every = 100
  c.train.keep_checkpoints = 2
  c.train.profile_steps = ()      # (start, stop): a jax.profiler trace of those steps into WORKDIR/profile
  # A Hugging Face directory (LlamaForCausalLM or T5 v1.1) to start from: its model shape and tokenizer
  # replace the model and tokenizer sections, its weights the random initialisation.
  c.train.init_from_hf = ""

  c.mesh = ml_collections.ConfigDict()
  c.mesh.data = -1                # -1 takes the devices left by the other axes
  c.mesh.fsdp = 1
  c.mesh.tensor = 1
  c.mesh.expert = 1               # MoE experts split over this axis (the batch too)
  # Multi-slice TPU runs: how much of each axis spans slices (DCN); the rest is within a slice (ICI).
  c.mesh.dcn_data = 1
  c.mesh.dcn_fsdp = 1
  c.mesh.dcn_tensor = 1
  c.mesh.dcn_expert = 1
  # Logical axis names -> mesh axes: a preset of parallel/mesh.py (fsdp_tensor | t5x | data_parallel) or
  # explicit pairs, e.g. (("activation_batch", ("data", "fsdp")), ("embed", "fsdp"), ("mlp", "tensor"), ...).
  c.mesh.rules = "fsdp_tensor"

  c.sample = ml_collections.ConfigDict()
  c.sample.num = 3                # samples printed at the end of the run
  c.sample.prompt_tokens = 12     # taken from the start of validation documents
  c.sample.max_new_tokens = 40
  c.sample.temperature = 0.7      # 0 is greedy
  return c
