"""Keeps freed host memory in the process, so XLA:CPU's buffers are reused, not page-faulted in again.

XLA:CPU mallocs every intermediate buffer of a step and frees it after. glibc
serves blocks over 32 MiB (and every block of a thread's own arena) from fresh
mmap pages and unmaps them on free, so each step touched gigabytes of new
pages: the Llama benchmark shape took 1.8 million page faults and 5 s of system
time per step. With all threads on the main heap, no mmap and no trimming, the
freed blocks are reused and the step is 1.3-1.6x faster (tools/bench_train.md).

The cost: the process keeps its peak heap until it exits, which a training
process reaches again every step anyway. The command line applies this at
start; a user who sets glibc's own malloc variables keeps theirs.
"""

import ctypes
import os
import platform

# mallopt(3) parameters, from glibc's malloc.h.
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8
_SETTINGS = ((_M_ARENA_MAX, 1),       # every thread allocates from the main heap (other arenas mmap big blocks)
             (_M_MMAP_MAX, 0),        # no block gets its own mapping
             (_M_TRIM_THRESHOLD, -1))  # freed memory at the top of the heap is never returned (-1: SIZE_MAX)


def keep_freed_memory() -> bool:
  """Applies the settings above where the C library is glibc and its malloc
  environment variables are unset; returns whether it did. Call it before
  JAX starts its threads (they take their arenas when they first allocate)."""
  if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
    return False
  if "GLIBC_TUNABLES" in os.environ or any(k.startswith("MALLOC_") for k in os.environ):
    return False
  libc = ctypes.CDLL(None)
  return all(libc.mallopt(param, value) == 1 for param, value in _SETTINGS)
