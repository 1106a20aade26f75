"""Which tokenizer? The same decoder-only model trained with each tokenizer kind on the same bytes of text.

  pretrain experiment compare_tokenizers [--kinds=spm_unigram,spm_bpe,wordpiece,byte_bpe,bytes] [--seeds=0,1,2]
      [--vocab_size=4096] [--row_bytes=512] [--steps=300] [--batch_size=16] [--d_model=128] [--num_layers=2]
      [--out=docs/tokenizers] [--out_dir=runs/tokenizers] [--config.KEY=VALUE ...]

Kinds (KINDS): SentencePiece unigram (the default) and BPE, WordPiece, byte-level BPE and raw bytes
(tokenizer.kind, pretrain/vocab/pipeline.py), each trained on the bundled corpus's train split (configs/quickstart.py
or --config) with --vocab_size ids (the sentinels included; bytes have their fixed size). Each kind's rows hold
--row_bytes bytes of text on average (their length in tokens: --row_bytes over the kind's bytes per token on the
validation split, to a multiple of 8), so every run trains on the same bytes of text in the same number of steps,
with the same model, optimizer and schedule, for each of --seeds (train.seed), in OUT_DIR/KIND/seedS
(pretrain/experiments/arms.py: a finished run is read back, a stopped one resumed).

Measured: validation bits per byte, of the true UTF-8 bytes of the text (for WordPiece, whose ids do not spell the
text's white space, the run's own bits per byte times the ratio of the bytes its ids spell to the text's bytes);
bytes per token, the unknown-id share and the encoding throughput (Python, one thread) on the validation split;
the share of parameters in the embedding and output matrices; tokenizer training time; wall time per run. A
figure 'a +- b' is the mean and the half-width of its 95% interval over the seeds (pretrain/downstream/stats.py:
independent runs, compared by Welch's t).
"""

import os
import shutil
import time

from pretrain import cli, objectives
from pretrain.data import sources
from pretrain.downstream import stats
from pretrain.experiments import arms, figures, runs
from pretrain.system.errors import exit_on_user_error
from pretrain.train import metrics
from pretrain.vocab import pipeline as vocab

# name: (tokenizer.kind, tokenizer.model_type)
KINDS = {"spm_unigram": ("sentencepiece", "unigram"), "spm_bpe": ("sentencepiece", "bpe"),
         "wordpiece": ("wordpiece", "unigram"), "byte_bpe": ("byte_bpe", "unigram"), "byte_unigram": ("byte_unigram", "unigram"),
         "bytes": ("bytes", "unigram")}
BPB = "val bits/byte"


def tokenizer(base, name: str, cache: str, texts: list[str]) -> dict:
  """Trains the kind's vocabulary into `cache` (timed) and measures it on the validation `texts`."""
  kind, model_type = KINDS[name]
  t = base.tokenizer
  start = time.perf_counter()
  path = vocab.cached_model(texts["train"], t.vocab_size, model_type, cache, objectives.pieces(base), t.extra_ids,
                            kind)
  seconds = time.perf_counter() - start
  vocabulary = vocab.load(path, t.extra_ids)
  start = time.perf_counter()
  encoded = [vocabulary.encode(text) for text in texts["validation"]]
  encode_seconds = time.perf_counter() - start
  tokens = sum(map(len, encoded))
  true_bytes = sum(len(text.encode("utf-8")) for text in texts["validation"])
  spelled = vocab.bytes_per_id(vocabulary)
  return {"path": path, "ids": vocabulary.vocab_size, "train_seconds": seconds,
          "bytes_per_token": true_bytes / tokens, "mb_per_second": true_bytes / encode_seconds / 1e6,
          "unknown": sum(ids.count(vocab.UNK_ID) for ids in encoded) / tokens,
          # Bytes the ids spell over the text's bytes: scales a run's bits per byte to the text's bytes.
          "spelled": sum(float(spelled[ids].sum()) for ids in encoded) / true_bytes}


def kind_config(base, name: str, measured: dict, args):
  cfg = base.copy_and_resolve_references()
  cfg.tokenizer.kind, cfg.tokenizer.model_type = KINDS[name]
  cfg.tokenizer.path = measured["path"]
  cfg.data.objective, cfg.data.eval_objectives = "clm", ()
  cfg.data.seq_len = max(8, round(args.row_bytes / measured["bytes_per_token"] / 8) * 8)
  runs.set_budget(cfg, args.steps, args.batch_size, args.evals)
  runs.set_model(cfg, args.d_model, args.num_layers, args.head_dim)
  return cfg


def curve(workdir: str, bytes_per_step: float, spelled: float) -> list[tuple[float, float]]:
  """Validation bits per byte of the text against the bytes of text trained on."""
  return [(r["step"] * bytes_per_step, r["eval/bits_per_byte"] * spelled) for r in metrics.read(workdir)
          if "eval/bits_per_byte" in r]


def table(measured: dict, results: dict) -> str:
  rows = ["| kind | ids | row tokens | bytes/token | unknown ids | embedding share | tokenizer training s | "
          f"encode MB/s | {BPB}, initial | {BPB}, trained | counts: bigram, trigram | wall s |",
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
  for name, seeds in results.items():
    m, r = measured[name], seeds[0]
    share = 1 - r["non_embedding_params"] / r["params"]
    rows.append(f"| {name} | {m['ids']} | {r['row']['targets']} | {m['bytes_per_token']:.2f} | {m['unknown']:.2%} | "
                f"{share:.0%} | {m['train_seconds']:.1f} | {m['mb_per_second']:.2f} | "
                f"{stats.text([s['curve'][0][1] for s in seeds])} | {stats.text([s['curve'][-1][1] for s in seeds])} "
                f"| {m['counts'][0]:.3f}, {m['counts'][1]:.3f} | {stats.text([s['wall'] for s in seeds], 0)} |")
  return "\n".join(rows)


def plot(results: dict, path: str) -> None:
  with figures.drawn(path) as ax:
    figures.seeds(ax, results, lambda r: r["curve"][1:])
    ax.set_xlabel("bytes of text trained on")
    ax.set_ylabel(BPB)
    ax.set_title("validation bits per byte of text (each seed; markers: the first)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def report(measured, results, args, argv, load) -> str:
  # WordPiece predicts a text without its white space: not compared (see the report's words).
  finals = {name: [s["curve"][-1][1] for s in seeds] for name, seeds in results.items() if name != "wordpiece"}
  apart = stats.apart(finals, higher_better=False)
  return runs.report("compare_tokenizers", argv, load, [
      "# Which tokenizer? Five kinds on one decoder-only model and the same bytes of text",
      f"Every run: {args.steps} steps x {args.batch_size} rows of about {args.row_bytes} bytes of text (the row "
      f"tokens column: --row_bytes over the kind's bytes per token), a causal LM {args.d_model} wide with "
      f"{args.num_layers} layers, the same optimizer and schedule, on the bundled corpus; vocabularies of "
      f"{args.vocab_size} ids with the sentinels (bytes: its fixed size); seeds {args.seeds}. A figure 'a +- b' is "
      "the mean and the half-width of its 95% interval over the seeds; 'initial' is the model before training.",
      table(measured, results),
      f"{BPB}: the causal loss on the validation rows in bits per UTF-8 byte of their text. bytes/token, unknown "
      "ids and encode MB/s: on the validation split (encode: Python, one thread). embedding share: the input "
      "embedding and output layer in all parameters. counts: interpolated Kneser-Ney bigram and trigram models "
      "of the train split in the kind's own vocabulary, on the same validation rows (pretrain/downstream/ngram.py): "
      "what a model must beat to have learned more than counts of adjacent ids.",
      "WordPiece is not comparable with the others on this measure: its ids do not spell the text's white space "
      "(newlines, indentation, runs of spaces: BERT's pre-tokenizer drops them), so its model predicts less "
      "information than the lossless kinds' models, which must predict every byte; and a word with a character "
      "its training text lacked is one unknown id, easier to predict than the word. Its figure is its own bits per "
      "spelled byte (a space before each word) times the ratio of spelled to true bytes; read it as a lower "
      "bound on what a lossless WordPiece would reach, not as a win.",
      f"{stats.VERDICT} lower is better, WordPiece aside: " + (", ".join(apart) or "no two kinds apart") + ".",
      f"![validation bits per byte]({os.path.basename(args.out)}.png)"])


@exit_on_user_error
def main(argv: list[str], prog: str = "pretrain experiment compare_tokenizers") -> int:
  parser = cli.parser_for(prog, __doc__)
  parser.add_argument("--kinds", default=",".join(k for k in KINDS if k != "byte_unigram"),  # docs/tokenizers.md's
                      help=f"comma-separated, of {', '.join(KINDS)}")
  parser.add_argument("--vocab_size", type=cli.at_least(400), default=4096, help="ids of every trained vocabulary")
  parser.add_argument("--row_bytes", type=cli.at_least(64), default=512, help="bytes of text per row")
  runs.add_flags(parser, "tokenizers", None, "KIND/seedS", model=True)
  args, base = cli.parse_command_line(parser, argv)
  names = runs.names(args.kinds, KINDS, "--kinds", "kinds")
  seeds = runs.seeds(args.seeds)
  base.tokenizer.vocab_size = args.vocab_size
  source = sources.make_source(base.data)
  learned = any(KINDS[name][0] != "bytes" for name in names)  # Bytes learn nothing from the text.
  texts = {"train": list(source.texts("train", max_chars=base.tokenizer.max_chars)) if learned else [],
           "validation": list(source.texts("validation"))}
  cache = os.path.join(args.out_dir, "tokenizer_cache")  # Fresh: tokenizer training is timed.
  shutil.rmtree(cache, ignore_errors=True)
  load = runs.machine()
  measured = {}
  for name in names:
    measured[name] = tokenizer(base, name, cache, texts)
    print(f"{name:<12} {measured[name]['ids']} ids, {measured[name]['bytes_per_token']:.2f} bytes/token, trained in "
          f"{measured[name]['train_seconds']:.1f} s", flush=True)
  configs = {name: kind_config(base, name, measured[name], args) for name in names}
  for name, cfg in configs.items():  # Reference rows, in bits per byte of the text as the runs' figures.
    bits, _ = runs.count_references(cfg)
    measured[name]["counts"] = [v["bits_per_byte"] * measured[name]["spelled"] for v in list(bits.values())[1:]]

  def measure(name, cfg, workdir, wall):
    r = arms.standard_figures(cfg, workdir, wall)
    bytes_per_step = args.batch_size * cfg.data.seq_len * measured[name]["bytes_per_token"]
    r["curve"] = curve(workdir, bytes_per_step, measured[name]["spelled"])
    return r

  def said(name, seed, r):
    print(f"[seed {seed}] {name:<12} {BPB} {r['curve'][-1][1]:.3f}  {r['wall']:.0f} s", flush=True)

  results = arms.each(configs, seeds, args.out_dir, measure, said=said)
  runs.write_report(args.out, lambda path: plot(results, path), report(measured, results, args, argv, load),
                    table(measured, results))
  return 0
