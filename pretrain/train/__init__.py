"""The trainer: optimizer, state, compiled steps, checkpoints, metrics and the loop.

Run it with `pretrain train --workdir=DIR` (the quickstart config by default).
"""
