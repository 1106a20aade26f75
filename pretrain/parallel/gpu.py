"""NVIDIA GPUs as a target to compile for without one: the CUDA plugin (jax-cuda13-plugin, without its CUDA
wheels: `pip install -e '.[gpu-compile]'`) compiles for a GPU described by XLA's target description, the same
kind of file XLA ships for its ahead-of-time compilation (xla/backends/gpu/target_config/specs).

  target("h100-16")   16 H100 80GB SXM GPUs, 8 a host (two hosts)
"""

import dataclasses
import importlib.util
import os
import re

from pretrain.parallel.tpu import Chip, on_tpu_vm
from pretrain.system.errors import UserError

# NVIDIA's H100 SXM datasheet: 989 TFLOP/s dense bfloat16, "80 GB" of HBM3 (84,942,979,072 bytes, as the
# driver reports it) at 3.35 TB/s, NVLink 900 GB/s (both directions together).
H100 = Chip("H100 80GB SXM", 989e12, 84_942_979_072, 3.35e12, 900e9, "NVIDIA H100 Tensor Core GPU datasheet (SXM)")
GPUS_PER_HOST = 8
_NVIDIA_DEVICES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg")  # A GPU, in a container, under WSL2 (as JAX looks).
# The device XLA's GPU compiler plans for (a GpuTargetConfigProto): an H100 SXM's limits and sizes.
_H100_TARGET = """gpu_device_info {
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: 132
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: 3352320000000
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: 84942979072
  shared_memory_per_block_optin: 232448
  cuda_compute_capability { major: 9 }
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}
platform_name: "CUDA"
dnn_version_info { major: 9 minor: 10 }
device_description_str: "NVIDIA H100 80GB HBM3"
"""


@dataclasses.dataclass(frozen=True)
class GpuTarget:
  """GPUs to compile for: `chips` of them, GPUS_PER_HOST a host."""
  name: str
  chips: int
  chip: Chip = H100
  slices: int = 1
  platform: str = "gpu"

  @property
  def hosts(self) -> int:
    return -(-self.chips // GPUS_PER_HOST)

  @property
  def topology(self) -> str:
    return f"1x{self.hosts}x{min(self.chips, GPUS_PER_HOST)}"  # slices x hosts x GPUs a host, as the plugin reads it

  def describe(self) -> str:
    return f"{self.name} ({self.chips} {self.chip.name} GPUs, {self.hosts} host{'s' if self.hosts > 1 else ''})"

  def devices(self) -> list:
    if not cuda_plugin_installed():
      raise UserError("compiling for a GPU needs JAX's CUDA plugin, which is not installed; install it without "
                      "CUDA itself: pip install -e '.[gpu-compile]'")
    from jax.experimental import topologies  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
    try:
      return list(topologies.get_topology_desc(platform="cuda", topology_name=self.topology,
                                               topology=self.topology, target_config=_H100_TARGET).devices)
    except Exception as e:  # pylint: disable=broad-except  (the plugin's own words: jax.errors.JaxRuntimeError)
      raise UserError(f"the CUDA plugin cannot describe {self.describe()}: {str(e).splitlines()[0]}") from None


def target(name: str, slices: int = 1) -> GpuTarget | None:
  """h100-N (N GPUs: 1 to 8, or a multiple of 8) as a target, or None for a name that is not a GPU's."""
  match = re.fullmatch(r"h100-(\d+)", name)
  if not match:
    return None
  chips = int(match[1])
  if slices != 1:
    raise UserError(f"--slices={slices} is for TPU slices; GPUs are one pool: give their number, e.g. h100-64")
  if chips < 1 or (chips > GPUS_PER_HOST and chips % GPUS_PER_HOST):
    raise UserError(f"--topology={name}: give 1 to {GPUS_PER_HOST} GPUs, or a multiple of {GPUS_PER_HOST} "
                    f"({GPUS_PER_HOST} a host)")
  return GpuTarget(name, chips)


def cuda_plugin_installed() -> bool:
  """Whether JAX's CUDA plugin is installed (found without importing it)."""
  return importlib.util.find_spec("jax_plugins") is not None and \
      importlib.util.find_spec("jax_plugins.xla_cuda13") is not None


def quiet_cuda_plugin() -> None:
  """Where the CUDA plugin is installed on a machine without NVIDIA GPUs (to compile for them), JAX's start would
  try to initialise it and print its failure (no CUDA, no cuDNN) as a traceback: keep JAX on the CPU there, which
  it would fall back to anyway. Compiling for GPUs still works. Nothing changes where the user chose
  JAX_PLATFORMS, on a machine with an NVIDIA device or TPU chips. Call before JAX starts its backends."""
  if (not cuda_plugin_installed() or "JAX_PLATFORMS" in os.environ or any(os.path.exists(p) for p in _NVIDIA_DEVICES) or on_tpu_vm()):
    return
  os.environ["JAX_PLATFORMS"] = "cpu"
