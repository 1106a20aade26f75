"""Cloud TPU slices by name: their hosts, chips and JAX devices, their chips' datasheet figures, and (with libtpu
installed, `pip install -e '.[tpu]'`) the devices of a slice's topology, which XLA compiles for on any machine.

  tpu_slice("v5p-128")        hosts, chips and JAX devices of an accelerator type (what `gcloud` creates)
  target("v5p-128", slices=2) that slice (or a topology name such as v5p:4x4x4) as devices to compile for
"""

import dataclasses
import glob
import importlib.util
import math
import os
import re

from pretrain.system.errors import UserError


@dataclasses.dataclass(frozen=True)
class TpuSlice:
  accelerator_type: str
  hosts: int    # TPU VMs ("workers"): one process each.
  chips: int
  devices: int  # JAX devices over all hosts.
  runtime: str  # Default --version (TPU software version) for JAX.


# Checked against Cloud TPU's documentation (cloud.google.com/tpu/docs: v4, v5p, v5e, v6e, runtimes,
# system-architecture-tpu-vm): v2-v4 and v5p names count TensorCores, 2 per chip, 4 chips per VM (v5p's
# table: v5p-8 = 4 chips on 1 host, v5p-16 = 2 hosts); v5litepod and v6e names count chips, 1 to 8 on one VM,
# and from 16 chips one VM per 4 chips (v6e's table: v6e-16 = 4 VMs; v5e: "one TPU VM for every four TPU
# chips"). JAX sees each v2/v3 TensorCore as a device, and a v4/v5p chip (2 cores, "megacore") as one.
# The runtimes are the documented "TPU software versions" for JAX.
_CORE_NAMED = {"v2": ("tpu-ubuntu2204-base", 2), "v3": ("tpu-ubuntu2204-base", 2), "v4": ("tpu-ubuntu2204-base", 1),
               "v5p": ("v2-alpha-tpuv5", 1)}  # generation: (runtime, JAX devices per chip)
_CHIP_NAMED = {"v5litepod": "v2-alpha-tpuv5-lite", "v6e": "v2-alpha-tpuv6e"}
_CHIP_COUNTS = (1, 4, 8, 16, 32, 64, 128, 256)
ACCEPTED = ("v2-N, v3-N, v4-N, v5p-N (N TensorCores, a multiple of 8: v4-8, v4-32, v5p-128, ...) or "
            "v5litepod-N, v6e-N (N chips: 1, 4, 8, 16, 32, 64, 128 or 256)")


def tpu_slice(accelerator_type: str) -> TpuSlice:
  """Hosts, chips and JAX devices of a Cloud TPU accelerator type such as v4-32."""
  match = re.fullmatch(r"(v2|v3|v4|v5p|v5litepod|v6e)-(\d+)", accelerator_type)
  if not match:
    raise UserError(f"--accelerator_type={accelerator_type!r} is not a TPU accelerator type this launcher knows; "
                    f"use {ACCEPTED}")
  generation, n = match[1], int(match[2])
  if generation in _CORE_NAMED:
    if n < 8 or n % 8:
      raise UserError(f"--accelerator_type={accelerator_type}: a {generation} slice has a multiple of 8 "
                      f"TensorCores (4 chips of 2 per host), e.g. {generation}-8 or {generation}-32")
    runtime, devices_per_chip = _CORE_NAMED[generation]
    return TpuSlice(accelerator_type, n // 8, n // 2, n // 2 * devices_per_chip, runtime)
  if n not in _CHIP_COUNTS:
    raise UserError(f"--accelerator_type={accelerator_type}: {generation} slices have "
                    f"{', '.join(map(str, _CHIP_COUNTS))} chips")
  return TpuSlice(accelerator_type, 1 if n <= 8 else n // 4, n, n, _CHIP_NAMED[generation])


@dataclasses.dataclass(frozen=True)
class Chip:
  """One chip's datasheet figures: what a roofline divides by."""
  name: str
  bf16_flops: float      # peak dense bfloat16 FLOP/s
  hbm_bytes: int
  hbm_bandwidth: float   # bytes/s
  ici_bandwidth: float   # bytes/s, both directions together, all links of the chip
  source: str


_GB, _GIB = 1e9, 2**30
# Cloud TPU's system-architecture pages (cloud.google.com/tpu/docs/v4, v5e, v5p, v6e), per chip. v4's page gives
# no ICI figure: six links (Jouppi et al., ISCA 2023, "TPU v4") of 50 GB/s each way.
CHIPS = {
    "v4": Chip("TPU v4", 275e12, 32 * _GIB, 1200 * _GB, 6 * 2 * 50 * _GB,
               "cloud.google.com/tpu/docs/v4; ICI: 6 links x 50 GB/s each way (Jouppi et al. 2023)"),
    "v5e": Chip("TPU v5e", 197e12, 16 * _GIB, 819 * _GB, 400 * _GB, "cloud.google.com/tpu/docs/v5e"),
    "v5p": Chip("TPU v5p", 459e12, 95 * _GIB, 2765 * _GB, 1200 * _GB, "cloud.google.com/tpu/docs/v5p"),
    "v6e": Chip("TPU v6e", 918e12, 32 * _GIB, 1640 * _GB, 800 * _GB, "cloud.google.com/tpu/docs/v6e"),
}
# Slice shapes (chips along each axis of the torus) by chip count, as Cloud TPU's pages list them.
_SHAPES_3D = {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8", 256: "4x8x8",
              512: "8x8x8", 1024: "8x8x16", 2048: "8x16x16", 4096: "16x16x16"}
_SHAPES_2D = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}
_GENERATION = {"v4": "v4", "v5p": "v5p", "v5litepod": "v5e", "v5e": "v5e", "v6e": "v6e"}
KNOWN = ("an accelerator type (v4-N, v5p-N with N TensorCores; v5litepod-N or v5e-N, v6e-N with N chips) or a "
         "topology (v4:2x2x4, v5p:4x4x4, v5e:4x4, v6e:16x16, ...)")


@dataclasses.dataclass(frozen=True)
class Target:
  """A TPU slice (or several, over the data-center network) to compile for."""
  name: str          # as given
  topology: str      # e.g. v5p:4x4x4
  chip: Chip
  chips: int         # per slice
  slices: int
  hosts: int         # per slice

  @property
  def platform(self) -> str:
    return "tpu"

  def describe(self) -> str:
    across = f" x {self.slices} slices" if self.slices > 1 else ""
    return (f"{self.name} ({self.topology}{across}: {self.chips * self.slices} {self.chip.name} chips, "
            f"{self.hosts * self.slices} host{'s' if self.hosts * self.slices > 1 else ''})")

  def devices(self) -> list:
    """The JAX devices of the slices (one per chip), from libtpu's description of the topology: nothing runs on
    them, XLA compiles for them."""
    if importlib.util.find_spec("libtpu") is None:
      raise UserError("compiling for a TPU needs libtpu, which is not installed; install the TPU extra: "
                      "pip install -e '.[tpu]' (it runs nothing on this machine's devices)")
    from jax.experimental import topologies  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
    generation = self.topology.split(":")[0]
    dims = [int(d) for d in self.topology.split(":")[1].split("x")]
    per_host = (2, 2, 1) if self.hosts > 1 or len(dims) == 3 else (*dims, 1)
    options = {"chips_per_host_bounds": per_host, "num_slices": self.slices}
    if generation in ("v4", "v5p"):
      options["chip_config_name"] = "megacore"  # One JAX device per chip, as on a TPU VM.
    try:
      return list(topologies.get_topology_desc(platform="tpu", topology_name=self.topology, **options).devices)
    except Exception as e:  # pylint: disable=broad-except  (libtpu's own words: jax.errors.JaxRuntimeError)
      raise UserError(f"libtpu cannot describe {self.describe()}: {str(e).splitlines()[0]}") from None


def target(name: str, slices: int = 1) -> Target:
  """A slice to compile for, named by accelerator type (v5p-128, v5litepod-16) or by topology (v5p:4x4x4), times
  `slices` slices joined over the data-center network."""
  if slices < 1:
    raise UserError(f"--slices={slices}: give 1 or more slices")
  match = re.fullmatch(r"(v4|v5p|v5litepod|v5e|v6e)-(\d+)", name)
  if match:
    generation = _GENERATION[match[1]]
    chips = int(match[2]) // (2 if generation in ("v4", "v5p") else 1)
    shapes = _SHAPES_3D if generation in ("v4", "v5p") else _SHAPES_2D
    if chips not in shapes:
      counts = ", ".join(str(c * (2 if generation in ("v4", "v5p") else 1)) for c in shapes)
      dims = "AxBxC" if generation in ("v4", "v5p") else "AxB"
      raise UserError(f"--topology={name}: {match[1]} slices this check knows are {match[1]}-N with N in {counts}; "
                      f"or give the topology itself ({generation}:{dims})")
    topology = f"{generation}:{shapes[chips]}"
  else:
    match = re.fullmatch(r"(v4|v5p|v5e|v6e):(\d+(?:x\d+){1,2})", name)
    if not match:
      raise UserError(f"--topology={name!r} is not a TPU slice or GPU pool this check knows; use {KNOWN} "
                      "(v2 and v3 are not supported), or h100-N for N H100 GPUs")
    generation, topology = match[1], name
    dims = [int(d) for d in match[2].split("x")]
    if len(dims) != (3 if generation in ("v4", "v5p") else 2):
      raise UserError(f"--topology={name}: a {generation} topology has {3 if generation in ('v4', 'v5p') else 2} "
                      "dimensions, e.g. v5p:4x4x4 or v5e:4x4")
    chips = math.prod(dims)
  hosts = max(chips // 4, 1) if generation in ("v4", "v5p") or chips > 8 else 1
  return Target(name, topology, CHIPS[generation], chips, slices, hosts)


# TPU chips on PCI: Google's vendor id and the chips' device ids (v3, v4, v5p, v5e, v6e, 7x), as JAX lists them
# (jax/_src/hardware_utils.py); read here without starting JAX.
_GOOGLE_PCI_VENDOR = "0x1ae0"
_TPU_PCI_DEVICES = {"0x0027", "0x0056", "0x005e", "0x0062", "0x0063", "0x006f", "0x0076"}


def on_tpu_vm() -> bool:
  """Whether this machine has TPU chips attached."""
  for vendor in glob.glob("/sys/bus/pci/devices/*/vendor"):
    try:
      with open(vendor) as f, open(os.path.join(os.path.dirname(vendor), "device")) as g:
        if f.read().strip() == _GOOGLE_PCI_VENDOR and g.read().strip() in _TPU_PCI_DEVICES:
          return True
    except OSError:
      continue
  return False


def without_tpus(quiet: bool = True) -> None:
  """Sets libtpu up for a machine without TPU chips, where it is installed to compile for TPUs; call before JAX
  starts. libtpu lets one process at a time load it (a lockfile in /tmp): two compilations at once, or a test
  suite's workers, would fail, so the lock is waived (ALLOW_MULTIPLE_LIBTPU_LOAD). JAX's start loads libtpu too,
  and it prints errors about the TPU hosts it cannot find: with `quiet`, naming this one host as the only worker
  hushes them, and JAX goes on to the CPU as before. Nothing changes on a TPU VM, nor what the user set."""
  if importlib.util.find_spec("libtpu") is None or on_tpu_vm():
    return
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  if quiet and "TPU_WORKER_HOSTNAMES" not in os.environ:
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-1")
    os.environ["TPU_WORKER_HOSTNAMES"] = "localhost"
