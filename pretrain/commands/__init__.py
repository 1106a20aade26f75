"""The pretrain command line's subcommands, one module each (pretrain/cli.py dispatches to them)."""
