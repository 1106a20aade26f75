"""The trainer: optimizer, state, compiled steps, checkpoints, metrics and the loop.

Run it with `python -m pretrain train --config=configs/quickstart.py --workdir=DIR`.
"""
