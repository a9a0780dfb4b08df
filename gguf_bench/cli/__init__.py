"""The `gguf-bench` command line: Typer signatures, tables and progress, one module per command group.
Every command body parses its options, makes one call into the library, and prints."""

from gguf_bench.cli import bandwidth, drafts, models, quality, runs, setup, tune  # noqa: F401 (each module registers its commands)
from gguf_bench.cli.app import app, main

__all__ = ["app", "main"]
