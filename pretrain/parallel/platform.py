"""The platform a program is built for: that of the mesh in context (jax.set_mesh), else the process's default.

A run compiled for a TPU slice from a CPU machine (pretrain compile) traces its step under a mesh of the slice's
devices; what the code chooses by platform (the attention kernel and its interpret mode, the activations' dtype,
the experts' grouped matmul) follows the mesh, not the machine.
"""

import jax


def current() -> str:
  """'tpu', 'gpu' or 'cpu'."""
  mesh = jax.sharding.get_abstract_mesh()
  if not mesh.empty and mesh.abstract_device is not None:
    return "gpu" if mesh.abstract_device.platform in ("cuda", "rocm") else mesh.abstract_device.platform
  return jax.default_backend()

