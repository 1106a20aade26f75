"""Flax Linen models. Every parameter carries logical axis names (see parallel/mesh.py)."""
