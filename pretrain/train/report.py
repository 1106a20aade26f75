"""What a finished run prints: validation perplexity against step 0, samples and where the outputs are."""

import os

import jax

from pretrain.train import metrics


def report(workdir: str, step: int, final: dict, pairs, eval_batches: int, vocabulary_file: str) -> dict:
  """Prints the run's summary; `eval_batches`: how many validation batches its evaluation read (a part of the
  split, train.eval_batches, where `pretrain eval` reads it whole: their losses differ); `vocabulary_file`: the
  name of the vocabulary in the workdir."""
  records = metrics.read(workdir)
  initial = next((r["eval/perplexity"] for r in records if r["step"] == 0 and "eval/perplexity" in r), None)
  if jax.process_index() == 0:
    plot = metrics.plot_curves(workdir)
    if "eval/perplexity" in final:
      lines = [f"Trained {step} steps. Validation loss {final['eval/loss']:.3f}, "
               f"perplexity {final['eval/perplexity']:.1f}"
               + (f" (step 0: {initial:.1f}, {_change(initial, final['eval/perplexity'])})" if initial else "")]
    else:  # An objective without a token loss (pretrain/families/): its own metrics.
      lines = [f"Trained {step} steps. Validation " + ", ".join(
          f"{k.split('/', 1)[1].replace('_', ' ')} {v:.3f}" for k, v in final.items() if k.count("/") == 1)]
    lines[0] += (f"; on {eval_batches} batches of the validation split (at most train.eval_batches; "
                 "`pretrain eval` reads all of it)")
    lines += ["Samples: a validation prompt, then >>> the model's continuation."] if pairs else []
    for i, (prompt, continuation) in enumerate(pairs, 1):
      lines += [f"[{i}] {prompt.rstrip()}", f">>> {continuation.strip()}"]
    lines += [f"Outputs in {workdir}: metrics.jsonl, tensorboard/, checkpoints/, config.json, goodput.json, "
              f"{vocabulary_file}, {os.path.basename(plot)}"]
    print("\n".join(lines), flush=True)
  return {"step": step, **final, "initial_perplexity": initial, "samples": pairs}


def _change(initial: float, final: float) -> str:
  """How a perplexity moved, as a ratio: '1.3x lower', '139x lower', '6.4x higher'."""
  ratio = initial / final if initial >= final else final / initial
  return f"{ratio:.{1 if ratio < 10 else 0}f}x {'lower' if initial >= final else 'higher'}"
