"""The pretrain command line's subcommands (pretrain/cli.py dispatches to them)."""
