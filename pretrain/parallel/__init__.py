"""Device meshes, logical-to-mesh axis rules and global arrays."""
