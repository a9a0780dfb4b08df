"""Which two GGUF files a command runs: a registry pair (fetched when missing) or --target/--draft."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from gguf_bench.errors import BenchError
from gguf_bench.models.download import Quantize, fetch, fetch_named, locate, no_progress
from gguf_bench.models.parts import model_path
from gguf_bench.models.registry import load_registry, parse_hub_ref

# A context manager giving a download.Progress callback while files are fetched (the CLI's progress bar).
ProgressFactory = Callable[[], AbstractContextManager]


@dataclass(frozen=True)
class PairFiles:
    target: Path
    draft: Path
    name: str  # registry pair name, or "<target file>+<draft file>"


@dataclass(frozen=True)
class PairChoice:
    """The pairs a command was given: registry pair names (None: the registry's default), or --target/--draft files."""

    names: list[str] | None = None
    target: Path | None = None
    draft: Path | None = None
    registry: Path | None = None  # the registry file to look names up in (None: the installed one)


def resolve(pair: str | None, target: Path | None, draft: Path | None, registry: Path | None,
            progress: ProgressFactory | None = None, quantize: Quantize | None = None) -> PairFiles:
    """A pair name (the registry's default when None), or both files; registry models are fetched if missing
    (when `progress` is given; `quantize` builds derived copies)."""
    if target or draft:
        if not (target and draft):
            raise BenchError("--target and --draft go together: give both files, or a pair name instead")
        if pair:
            raise BenchError("give either a pair name or --target/--draft, not both")
        target, draft = (model_file(str(m), registry, progress, quantize) for m in (target, draft))
        return PairFiles(target, draft, f"{target.name}+{draft.name}")
    reg = load_registry(registry)
    chosen = reg.pair(pair or reg.default)
    paths = [_local(ref, chosen.name, reg, progress, quantize) for ref in (chosen.target, chosen.draft)]
    return PairFiles(paths[0], paths[1], chosen.name)


def model_file(source: str, registry: Path | None = None, progress: ProgressFactory | None = None,
               quantize: Quantize | None = None) -> Path:
    """A model named the way llama.cpp names one: a GGUF path, a registry model, or a hub file (REPO:QUANT or
    REPO/FILE.gguf, downloaded into the Hugging Face cache): download.fetch_named, under `progress`'s bar."""
    if Path(source).is_file():
        return model_path(Path(source))
    if source.endswith(".gguf") and parse_hub_ref(source) is None:  # a path
        raise BenchError(f"model file {source} does not exist")
    with progress() if progress else nullcontext(no_progress) as callback:
        return fetch_named(source, registry, callback, quantize)


def header_sources(pair: str | None, target: Path | str | None, draft: Path | str | None,
                   registry: Path | None) -> tuple[str, str, str]:
    """The pair's two models as sources a header can be read from without a download (models/headers.source_prefix:
    registry model names, or the --target/--draft given, files or hub files), and the pair's name as `resolve`
    names it."""
    if target or draft:
        if not (target and draft):
            raise BenchError("--target and --draft go together: give both files, or a pair name instead")
        if pair:
            raise BenchError("give either a pair name or --target/--draft, not both")
        return str(target), str(draft), f"{Path(str(target)).name}+{Path(str(draft)).name}"
    reg = load_registry(registry)
    chosen = reg.pair(pair or reg.default)
    return chosen.target.name, chosen.draft.name, chosen.name


def _local(ref, pair_name: str, reg, progress: ProgressFactory | None, quantize: Quantize | None) -> Path:
    path = locate(ref, reg)
    if path is not None:
        return path
    if progress is None:
        raise BenchError(f"model '{ref.name}' of pair '{pair_name}' is not downloaded; run `gguf-bench download {pair_name}`")
    with progress() as callback:
        return fetch(ref, reg, callback, quantize).path


def resolve_for_info(items: list[str], registry: Path | None) -> tuple[list[Path], list[str]]:
    """`info`'s arguments: one pair name (already downloaded), or GGUF files. Returns paths and labels."""
    looks_like_path = any(i.endswith(".gguf") or "/" in i for i in items)
    if len(items) == 1 and not looks_like_path:
        chosen = load_registry(registry).pair(items[0])
        files = resolve(chosen.name, None, None, registry)
        return [files.target, files.draft], [f"target: {chosen.target.name}", f"draft: {chosen.draft.name}"]
    missing = [i for i in items if not Path(i).is_file()]
    if missing:
        raise BenchError(f"model file {missing[0]} does not exist (to name a pair, give its name alone; "
                         "`gguf-bench models` lists them)")
    labels = ["target", "draft"] if len(items) == 2 else [Path(i).name for i in items]
    return [model_path(Path(i)) for i in items], labels
