"""`python -m gguf_bench.cli`: the same as the gguf-bench command."""

from gguf_bench.cli import main

main()
