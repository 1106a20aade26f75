"""The command line keeps freed host memory: a block freed and allocated again is not page-faulted in again."""

import os
import subprocess
import sys

import pytest

from pretrain.system import host_memory

# Mallocs, fills and frees 64 MiB (as XLA:CPU does with a buffer), then prints the page faults of doing it again.
_SECOND_ALLOCATION_FAULTS = """
import ctypes, resource, sys
from pretrain.system import host_memory
applied = sys.argv[1] == "1" and host_memory.keep_freed_memory()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
def fill_and_free():
  block = libc.malloc(1 << 26)
  ctypes.memset(block, 1, 1 << 26)
  libc.free(block)
fill_and_free()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
fill_and_free()
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _second_allocation_faults(apply: bool, **env) -> tuple[str, int]:
  clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
  out = subprocess.run([sys.executable, "-c", _SECOND_ALLOCATION_FAULTS, "1" if apply else "0"], env={**clean, **env},
                       check=True, capture_output=True, text=True).stdout.split()
  return out[0], int(out[1])


@pytest.mark.skipif(not host_memory.keep_freed_memory(), reason="needs glibc (Linux)")
def test_freed_blocks_are_reused_not_faulted_in_again():
  pages = (1 << 26) // os.sysconf("SC_PAGE_SIZE")
  applied, faults = _second_allocation_faults(True)
  assert applied == "True" and faults < pages // 20
  # glibc's defaults map the block afresh: every page faults again. This is what the setting removes.
  applied, faults = _second_allocation_faults(False)
  assert applied == "False" and faults > pages // 2
  # A user's own malloc settings are left alone.
  applied, faults = _second_allocation_faults(True, MALLOC_ARENA_MAX="4")
  assert applied == "False" and faults > pages // 2
