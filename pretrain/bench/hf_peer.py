"""The peer of `pretrain bench`: the same architecture, batch and optimizer
step in transformers (PyTorch, eager, on the CPU).

The model is built from the config.json our export would write (pretrain.hf),
so the two sides compute the same network.
"""

import time

import numpy as np
import torch
import transformers

from pretrain import hf


def versions() -> str:
  return (f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} intra-op threads, {torch.get_num_interop_threads()} inter-op")


def prepare(run, threads: int) -> tuple:
  """The peer of a run's (pretrain.run.Run) architecture, batch and AdamW step in transformers, on `threads`
  threads: a function that runs one step, and the rows known before timing (the first step, run here)."""
  torch.manual_seed(0)
  torch.set_num_threads(threads)
  rows, row = run.cfg.train.batch_size, run.family.row_lengths(run.task_lengths)
  config = hf.architecture(run.family.hf, run.cfg.model).hf_config(run.cfg.model, run.vocab_size,
                                                               sum(run.task_lengths.values()))
  config = transformers.AutoConfig.for_model(config.pop("model_type"), **config)
  seq2seq = "inputs" in row  # An encoder and a decoder.
  auto = transformers.AutoModelForSeq2SeqLM if seq2seq else transformers.AutoModelForCausalLM
  model = auto.from_config(config, dtype=torch.float32).train()
  if seq2seq:  # transformers 5 ties T5's output layer to the embedding; T5 v1.1 (and ours) does not.
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
  optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
  rng = np.random.default_rng(0)
  tokens = lambda length: torch.from_numpy(rng.integers(3, run.vocab_size, (rows, length)))
  if seq2seq:
    batch = {"input_ids": tokens(row["inputs"]), "labels": tokens(row["targets"])}
  else:
    ids = tokens(row["targets"])
    batch = {"input_ids": ids, "labels": ids}

  def step():
    optimizer.zero_grad(set_to_none=True)
    loss = model(**batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return float(loss.detach())

  start = time.perf_counter()
  step()
  return step, {"params": sum(p.numel() for p in model.parameters()), "compile s": time.perf_counter() - start}
