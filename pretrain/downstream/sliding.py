"""Sliding-window evaluation of a causal LM: every token of a split's text scored once, each with at least
window - stride tokens of the text before it as its context (the evaluation of Transformer-XL's and GPT-2's
language-modelling rows, and of Hugging Face's perplexity guide). stride = window gives disjoint windows, what
lm-eval's rolling log-likelihood reads.

The text is the split's documents in order, each with its EOS (the causal-LM task's pieces joined, which is
also data.context=stream's text). A window is a row as training makes them: its first input is the start token
(id 0), then its tokens shifted right, so the first window scores the text's first token as training scores a
row's; every later window scores only its last `stride` tokens.
"""

import numpy as np

from pretrain.system.errors import UserError

FEATURES = ("decoder_target_tokens", "decoder_input_tokens", "decoder_loss_weights", "decoder_segment_ids",
            "decoder_positions")


def windows(length: int, window: int, stride: int) -> list[tuple[int, int, int]]:
  """(start, scored_from, end) of each window over a text of `length` tokens: it reads tokens [start, end) and
  scores [scored_from, end). The scored ranges tile [0, length); each scored token after the first window has at
  least window - stride tokens of the window before it."""
  if not 0 < stride <= window:
    raise UserError(f"--stride={stride} with --window={window}: give a stride from 1 to the window")
  spans, scored = [], 0
  while scored < length:
    end = min(length, scored + (stride if spans else window))
    spans.append((max(0, end - window), scored, end))
    scored = end
  return spans


def rows(text: np.ndarray, window: int, stride: int, width: int) -> dict[str, np.ndarray]:
  """The decoder-only rows of the windows over `text` (token ids), each padded to `width` tokens."""
  spans = windows(len(text), window, stride)
  batch = {name: np.zeros((len(spans), width), np.int32) for name in FEATURES}
  for i, (start, scored_from, end) in enumerate(spans):
    n = end - start
    batch["decoder_target_tokens"][i, :n] = text[start:end]
    batch["decoder_input_tokens"][i, 1:n] = text[start:end - 1]
    batch["decoder_loss_weights"][i, scored_from - start:n] = 1
    batch["decoder_segment_ids"][i, :n] = 1
    batch["decoder_positions"][i, :n] = np.arange(n)
  return batch


def text_of(task, lengths: dict[str, int], split: str) -> np.ndarray:
  """The split's text as token ids: the causal-LM task's pieces (documents with their EOS) in order, joined."""
  pieces = [example["targets"] for example in task.get_dataset(lengths, split=split, shuffle=False)
            .as_numpy_iterator()]
  if not pieces:
    raise UserError(f"the {split} split of {task.name} holds no text")
  return np.concatenate(pieces).astype(np.int32)


def global_batches(run, text: np.ndarray, window: int, stride: int) -> list:
  """The windows' rows as global batches of train.batch_size rows (the last padded with empty rows), each process
  holding its block (Run.data_share)."""
  from pretrain.parallel import mesh as mesh_lib  # pylint: disable=g-import-not-at-top  (JAX: only when scoring)
  width = run.task_lengths["targets"]
  if window > width:
    raise UserError(f"--window={window} is longer than the run's rows of {width} tokens (data.seq_len), the "
                    f"longest context it trained at; give --window={width} or less")
  all_rows = rows(text, window, stride, width)
  size, (block, blocks) = run.cfg.train.batch_size, run.data_share
  count = -(-len(all_rows["decoder_target_tokens"]) // size) * size
  padded = {name: np.pad(value, ((0, count - len(value)), (0, 0))) for name, value in all_rows.items()}
  per_block = size // blocks
  return [mesh_lib.global_batch({name: value[b + block * per_block:b + (block + 1) * per_block]
                                 for name, value in padded.items()}, run.batch_sharding)
          for b in range(0, count, size)]
