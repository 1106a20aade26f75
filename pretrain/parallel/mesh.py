"""The device mesh and the mapping from logical axis names to mesh axes.

Models name their axes logically ('embed', 'mlp', 'activation_batch', ...);
the run config's `mesh.rules` maps each name to mesh axes, so the same model
runs data-parallel, FSDP, tensor-, expert-, context- or pipeline-parallel by changing the config only.

Context parallelism splits each row's tokens over the `context` axis: every
activation [B, L, ...] holds L / context positions per device, and attention
gathers the keys and values of the whole row (models/attention.py), so each
device computes its own queries' attention over the whole row.

Pipeline parallelism splits the scanned layers (their 'layers' axis) over the `stage` axis, each device holding
a contiguous block of layers (models/pipeline.py).
"""

import ast
import math
from typing import NamedTuple

import flax.linen as nn
import jax
from jax.experimental import mesh_utils
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from pretrain.system.errors import UserError

AXES = ("data", "stage", "fsdp", "expert", "context", "tensor")

# The batch is split over the expert axis too: its devices hold different experts and different rows (GShard).
# A row's positions over the context axis (context parallelism).
_ACTIVATIONS = (("activation_batch", ("data", "fsdp", "expert")), ("activation_length", "context"),
                ("activation_embed", None), ("activation_mlp", "tensor"), ("activation_heads", "tensor"),
                ("activation_vocab", "tensor"))
# Named sets of rules for mesh.rules. Parameters' logical axes: embed, mlp, heads, kv_heads, kv, vocab, layers,
# exp (a mixture-of-experts layer's experts; also its dispatched activations [experts, capacity, D]).
PRESETS = {
    # Parameters sharded over fsdp (their embed axis), tensor (heads, mlp, vocab) and expert (the experts): ZeRO-3
    # plus Megatron plus expert parallelism.
    "fsdp_tensor": _ACTIVATIONS + (("embed", "fsdp"), ("mlp", "tensor"), ("heads", "tensor"),
                                   ("kv_heads", "tensor"), ("kv", None), ("vocab", "tensor"),
                                   ("layers", "stage"), ("exp", "expert")),
    # T5X's standard rules: parameters split along the model (tensor) axis only, replicated over the batch axes;
    # experts over the expert axis.
    "t5x": _ACTIVATIONS + (("embed", None), ("mlp", "tensor"), ("heads", "tensor"), ("kv_heads", "tensor"),
                           ("kv", None), ("vocab", "tensor"), ("layers", "stage"), ("exp", "expert")),
    # Pure data parallelism: every parameter replicated.
    "data_parallel": (("activation_batch", AXES),) + tuple(
        (name, None) for name in ("activation_length", "activation_embed", "activation_mlp", "activation_heads",
                                  "activation_vocab", "embed", "mlp", "heads", "kv_heads", "kv", "vocab", "layers",
                                  "exp")),
}


def _listed(names) -> str:
  *rest, last = names
  return f"{', '.join(rest)} and {last}"


def mesh_shape(mesh_cfg, num_devices: int) -> tuple[int, ...]:
  """Sizes of (data, stage, fsdp, expert, context, tensor); one size may be -1 to take the remaining devices."""
  sizes = [mesh_cfg[a] for a in AXES]
  if sizes.count(-1) > 1 or any(s == 0 or s < -1 for s in sizes):
    raise UserError(f"mesh sizes {dict(zip(AXES, sizes))} are invalid: use positive sizes and at most one -1")
  known = math.prod(s for s in sizes if s != -1)
  if -1 in sizes:
    if num_devices % known:
      raise UserError(f"mesh {dict(zip(AXES, sizes))} does not divide the {num_devices} devices; "
                      f"choose sizes whose product divides {num_devices}" + _FEWER * (known > num_devices))
    sizes[sizes.index(-1)] = num_devices // known
  if math.prod(sizes) != num_devices:
    raise UserError(f"mesh {dict(zip(AXES, sizes))} has {math.prod(sizes)} devices but {num_devices} are "
                    f"available; make the product of {_listed('mesh.' + a for a in AXES)} equal that, or set "
                    "mesh.data=-1 to take the devices the others leave" + _FEWER * (math.prod(sizes) > num_devices))
  return tuple(sizes)


# Where a mesh asks for more devices than a CPU has: how to try it there.
_FEWER = (" (on a CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N makes N devices; estimate-memory takes "
          "--devices=N and compile a TPU --topology)")


def split_over_slices(sizes: tuple[int, ...], dcn: tuple[int, ...]) -> tuple[int, ...]:
  """The within-slice (ICI) part of each axis, given the part (`dcn`) that spans slices."""
  for axis, size, across in zip(AXES, sizes, dcn):
    if across < 1 or size % across:
      raise UserError(f"mesh.dcn_{axis}={across} must be a positive divisor of the {axis} axis size {size}")
  return tuple(size // across for size, across in zip(sizes, dcn))


def make_mesh(mesh_cfg, devices=None) -> jax.sharding.Mesh:
  """The mesh of all devices (or of `devices`: a TPU slice's, to compile for it). On multi-slice TPUs,
  mesh.dcn_data / dcn_stage / dcn_fsdp / dcn_expert / dcn_context / dcn_tensor say how much of each axis spans
  slices (over the data-center network): the rest stays within a slice (ICI)."""
  devices = jax.devices() if devices is None else devices
  sizes = mesh_shape(mesh_cfg, len(devices))
  dcn = tuple(mesh_cfg[f"dcn_{axis}"] for axis in AXES)
  # Auto axes: XLA propagates the shardings that the logical constraints pin down.
  axis_types = (jax.sharding.AxisType.Auto,) * len(AXES)
  slices = len({getattr(d, "slice_index", 0) for d in devices})
  if dcn == (1,) * len(AXES):
    if slices > 1:
      raise UserError(f"these devices span {slices} TPU slices, but no mesh axis spans slices; set mesh.dcn_data="
                      f"{slices} (data parallelism over the data-center network), or another mesh.dcn_* axis")
    try:
      return jax.make_mesh(sizes, AXES, axis_types=axis_types, devices=devices)
    except NotImplementedError:  # A TPU torus whose axes the mesh's sizes do not group (4 x 4 over 8 x 8 x 4):
      grid = mesh_utils.create_device_mesh(sizes, devices, allow_split_physical_axes=True)
      return jax.sharding.Mesh(grid, AXES, axis_types=axis_types)
  if not hasattr(devices[0], "slice_index"):
    raise UserError(f"mesh.dcn_* = {dcn} asks for a multi-slice mesh, but these {devices[0].platform} "
                    f"devices belong to no TPU slices; leave {_listed('mesh.dcn_' + a for a in AXES)} at 1")
  if math.prod(dcn) != slices:
    raise UserError(f"mesh.dcn_* = {dict(zip(AXES, dcn))} spans {math.prod(dcn)} slices, but the devices form "
                    f"{slices}; make the product of {_listed('mesh.dcn_' + a for a in AXES)} {slices}")
  ici = split_over_slices(sizes, dcn)
  devices = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices)
  return jax.sharding.Mesh(devices, AXES, axis_types=axis_types)


def rules(mesh_cfg) -> tuple[tuple[str, object], ...]:
  """The logical axis rules of the config (a PRESETS name or (logical, mesh axes) pairs), checked
  against the mesh axes."""
  given = mesh_cfg.rules
  if isinstance(given, str) and given.lstrip().startswith(("(", "[")):  # Pairs, kept as text (config/keys.py).
    try:
      given = ast.literal_eval(given)
    except (ValueError, SyntaxError):
      raise UserError(f"mesh.rules={given!r} is not a Python literal of (logical axis, mesh axes) pairs") from None
  if isinstance(given, str):
    if given not in PRESETS:
      raise UserError(f"mesh.rules={given!r} is not a preset; use one of {', '.join(PRESETS)} or a tuple of "
                      "(logical axis, mesh axes) pairs")
    given = PRESETS[given]
  result = tuple((name, tuple(axes) if isinstance(axes, list) else axes) for name, axes in given)
  for name, axes in result:
    for axis in (axes if isinstance(axes, tuple) else (axes,)):
      if axis is not None and axis not in AXES:
        raise UserError(f"mesh.rules maps {name!r} to unknown mesh axis {axis!r}; use one of {AXES} or None")
  return result


def logical_shardings(logical_specs, mesh, axis_rules):
  """NamedShardings for a tree of logical PartitionSpecs."""
  return nn.logical_to_mesh_sharding(logical_specs, mesh, axis_rules)


def batch_sharding(mesh, axis_rules) -> NamedSharding:
  """How a [batch, length] array of inputs is laid out: batch over the data-like axes, each row whole (a context
  axis splits the rows inside the step: every process reads whole rows)."""
  return logical_shardings(P("activation_batch", None), mesh, axis_rules)


def axes_size(mesh, axes) -> int:
  """How many devices the mesh axes `axes` (a name, a tuple of names or None) span."""
  return math.prod(mesh.shape[a] for a in (axes if isinstance(axes, tuple) else (axes,)) if a is not None)


def constrain(x, names: tuple):
  """nn.with_logical_constraint of `x` to logical `names`, except a dimension its mesh axes do not divide, which
  is left whole (decoding's one query position under a context axis, `init`'s example row)."""
  mesh = jax.sharding.get_abstract_mesh()
  if not mesh.empty:
    axes = nn.logical_to_mesh_axes(names)
    names = tuple(None if dim % axes_size(mesh, a) else name for name, a, dim in zip(names, axes, x.shape))
  return nn.with_logical_constraint(x, names)


def length_split(mesh, axis_rules) -> int:
  """How many devices split a row's positions under `axis_rules` (the context axis's size, in the presets)."""
  return axes_size(mesh, dict(axis_rules).get("activation_length"))


def layer_split(mesh, axis_rules) -> int:
  """How many pipeline stages split the scanned layers under `axis_rules` (the stage axis's size, in the presets)."""
  return axes_size(mesh, dict(axis_rules).get("layers"))


def split_length() -> int:
  """length_split under the active mesh and rules (1 outside a mesh)."""
  mesh = jax.sharding.get_abstract_mesh()
  return 1 if mesh.empty else axes_size(mesh, nn.logical_to_mesh_axes(("activation_length",))[0])


def data_parallel_size(mesh, axis_rules) -> int:
  return axes_size(mesh, batch_sharding(mesh, axis_rules).spec[0])


class DataShare(NamedTuple):
  """The rows of every global batch that this process reads: block `index` of `count` equal blocks."""
  index: int
  count: int


def data_share(sharding: NamedSharding) -> DataShare:
  """This process's block of a batch laid out by `sharding`: the rows its devices hold. Processes whose devices
  hold the same rows (a stage, context or tensor axis that spans processes) read the same block; with the batch
  axes across processes, each reads its own. The mesh's axis order (AXES) keeps each process's rows one block."""
  shards = axes_size(sharding.mesh, sharding.spec[0])  # A batch of one row per shard.
  held = sorted({row for index in sharding.addressable_devices_indices_map((shards,)).values()
                 for row in range(shards)[index[0]]})
  return DataShare(held[0] // len(held), shards // len(held))


def global_batch(local_batch: dict[str, np.ndarray], sharding: NamedSharding) -> dict[str, jax.Array]:
  """Assembles each process's rows of a batch (its data_share) into global jax.Arrays."""
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local_batch.items()}
