"""The Typer app, its consoles, and the wrapper that turns library errors into one line.

Library code raises BenchError subclasses; `command` turns them into one `Error: ...` line on stderr and
exit status 1 (Ctrl-C: 'Interrupted.' and 130).
"""

from __future__ import annotations

import functools
from typing import Annotated

import typer
from rich.console import Console

from gguf_bench.cli import examples

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Find the draft model, draft length and GPU offload that make a GGUF model fastest, "
                       "and check that speculative decoding keeps its quality.")
console = Console(highlight=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def _print_version(value: bool) -> None:
    if value:
        from gguf_bench import __version__
        from gguf_bench.runtimes.llama_cpp import llama_versions

        console.print(f"gguf-bench {__version__}, llama-cpp-python {llama_versions()['llama_cpp_python'] or 'not installed'}",
                      markup=False)
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                                help="print the versions of gguf-bench and llama-cpp-python")] = False) -> None:
    pass


def command(fn):
    """Register `fn` as a command; user errors become one line on stderr and exit 1."""
    from gguf_bench.errors import BenchError

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BenchError as exc:
            err.print(f"Error: {exc}", markup=False)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err.print("Interrupted.", markup=False)
            raise typer.Exit(130) from None

    return app.command(epilog=examples.epilog(fn.__name__.replace("_", "-")))(wrapper)


def main() -> None:
    app(prog_name="gguf-bench")
