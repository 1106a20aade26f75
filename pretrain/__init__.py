"""pretrain: pre-training language models with JAX, Flax, Optax, Orbax and SeqIO."""
