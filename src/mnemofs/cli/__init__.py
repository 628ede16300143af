"""The ``mnemofs`` command line."""

from mnemofs.cli.app import cli, main

__all__ = ["cli", "main"]
