"""What the experiments' tests share: a run budget small enough for a CPU test, and the tables of a written page."""

# A model and budget small enough for a CPU test: a few seconds of training per run.
TINY = ["--steps=3", "--batch_size=4", "--seq_len=64", "--evals=3", "--config.train.eval_batches=2"]


def table_rows(path: str) -> list[str]:
  """The rows (after the header) of a file's markdown tables, all together."""
  with open(path) as f:
    return [line for line in f if line.startswith("| ") and not line.startswith("| ---")][1:]


def tables(path: str) -> list[list[str]]:
  """The rows (after the header) of each markdown table of a file."""
  with open(path) as f:
    blocks = f.read().split("\n\n")
  return [block.strip().split("\n")[2:] for block in blocks if block.startswith("| ")]
