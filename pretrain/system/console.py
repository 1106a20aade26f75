"""Messages to the person running a command: from the first process only, above any progress bar."""

import jax
import tqdm


def log(message: str) -> None:
  if jax.process_index() == 0:
    tqdm.tqdm.write(message)
