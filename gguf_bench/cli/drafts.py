"""The `drafts` command: every draft that can serve a target, judged from headers, ranked before any download."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from gguf_bench import options
from gguf_bench.cli.app import command, console, err
from gguf_bench.cli.options import RegistryOpt
from gguf_bench.errors import BenchError
from gguf_bench.models import candidates as cands
from gguf_bench.results import drafts as ranking
from gguf_bench.results.text import size_text


@command
def drafts(target: Annotated[str, typer.Argument(help="the target: a GGUF file, a registry model, or a hub file "
                                                 "REPO:QUANT or REPO/FILE.gguf (llama.cpp's -hf spelling)")],
           search: Annotated[list[Path] | None, typer.Option("--search", help="a folder to search for GGUF drafts "
                                                            "(repeat for more)")] = None,
           quants: Annotated[str, typer.Option("--quants", help="the quants to take from each hub repository")
                             ] = ",".join(cands.DEFAULT_QUANTS),
           vram: Annotated[str | None, typer.Option("--vram", help="device memory: show whether each draft fits "
                                                    "beside the target (all layers of both, at --ctx)")] = None,
           ctx_size: Annotated[int, typer.Option("--ctx-size", "--ctx", "-c", help="context size of each model, "
                                                 "for --vram")] = 4096,
           offline: Annotated[bool, typer.Option("--offline", help="search no hub: the registry and local files "
                                                 "only")] = False,
           no_caches: Annotated[bool, typer.Option("--no-caches", help="search neither the HF cache, llama.cpp's "
                                                   "cache nor LM Studio's folder (only --search and the registry)")
                                ] = False,
           as_json: Annotated[bool, typer.Option("--json", help="print the ranking and every verdict as JSON")] = False,
           verbose: Annotated[bool, typer.Option("--verbose", "-v", help="also print what was read: headers, bytes, "
                                                 "requests, seconds")] = False,
           registry: RegistryOpt = None) -> None:
    """Find every draft that can serve TARGET: the registry's drafts, local GGUF files, the hub's smaller models of
    its family and lower quants of its own repository, sidecars, its MTP heads and the n-gram types. Each is judged
    from its header alone by llama.cpp's own rule (nothing is downloaded) and ranked by the gain the cost model
    predicts."""
    qs = tuple(q.strip().upper() for q in quants.split(",") if q.strip())
    if not qs:
        raise BenchError("--quants needs at least one quant, e.g. Q8_0,Q4_K_M")
    budget = options.byte_size(vram, "--vram") if vram else None
    for folder in search or []:
        if not folder.is_dir():
            raise BenchError(f"--search {folder}: no such folder")
    start = time.perf_counter()
    reader = cands.HeaderReader()
    opts = cands.Options(tuple(search or ()), qs, hub=not offline, local_caches=not no_caches, registry=registry)
    found = cands.find(target, opts, reader)
    read = [c for c in found.candidates if c.needs_file and c.status in ("compatible", "incompatible")]
    if not read:
        where = ", ".join(found.searched) or "nowhere"
        hub = f"; {found.hub_error}" if found.hub_error else ""
        bad = [c.name for c in found.candidates if c.status == "unreadable"]
        why = next((c.reason for c in found.candidates if c.status == "unreadable"), "")
        unread = f"; unreadable: {', '.join(bad)} (first: {why})" if bad else ""
        raise BenchError(f"no draft candidate found for {target} (searched: {where}){hub}{unread}")
    rows = ranking.rank(found.target.header, found.candidates, budget, ctx_size)
    seconds = time.perf_counter() - start
    if as_json:
        console.print_json(json.dumps({"target": target, "ranking": ranking.to_json(rows),
                                       "candidates": cands.to_json(found), "searched": found.searched,
                                       "hub_error": found.hub_error}))
    else:
        _print(found, rows, target, vram)
    if found.hub_error:
        err.print(f"Note: {found.hub_error}; searched locally: {', '.join(found.searched) or 'nothing'}", markup=False)
    if verbose:
        s = reader.stats
        err.print(f"read {s.headers_read} headers ({s.cached} more from the cache), {s.bytes / 2**20:.2f} MB from the "
                  f"hub in {s.requests} ranged requests, {found.hub_repos} hub repositories, {seconds:.1f} s",
                  markup=False)


def _print(found: cands.Search, rows: list[ranking.Ranked], target: str, vram: str | None) -> None:
    h = found.target.header
    console.print(f"target: {target} ({h.architecture}, {size_text(h.file_size)})", markup=False, soft_wrap=True)
    mid = ranking.ALPHAS[len(ranking.ALPHAS) // 2]
    if not rows:
        console.print("no compatible draft file found", markup=False)
    else:  # each draft's name on a line of its own (never folded), its figures under it
        console.print(f"compatible drafts, best first (by gain at {mid:.0%} acceptance):", markup=False)
        heads = ["from", "size", "c", *(["fits"] if vram else []), "b/e", *[f"+%@{a * 100:.0f}" for a in ranking.ALPHAS]]
        widths = [9, 10, 5, *([4] if vram else []), 4, *[7] * len(ranking.ALPHAS)]
        line = lambda cells: "    " + "  ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}"  # noqa: E731
                                               for i, (c, w) in enumerate(zip(cells, widths)))
        console.print(line(heads).rstrip(), style="bold", markup=False)
        for i, r in enumerate(rows, 1):
            c = r.candidate
            origin = c.origin if c.kind == "draft-simple" else c.kind.removeprefix("draft-")  # a sidecar says which
            fit = [] if not vram else ["?" if r.fits is None else "yes" if r.fits else "no"]
            gains = [f"{g:+.0f} K{k}" if g > -100 else "–" for g, k in (r.gains.get(a, (-999, 0)) for a in ranking.ALPHAS)]
            console.print(f"{i:>2}  {c.name}", markup=False, soft_wrap=True)
            console.print(line([origin, size_text(c.header.file_size), "?" if r.cost_ratio is None else
                                f"{r.cost_ratio:.2f}", *fit, "–" if r.break_even is None else f"{r.break_even:.0%}",
                                *gains]).rstrip(), markup=False)
        console.print("c: the draft's time per token / the target's, from the bytes each reads per token (a batch "
                      "verified in the time of one token); b/e: the acceptance below which no K gains; +%@A: the gain "
                      "predicted at acceptance A, at its best K", style="dim", markup=False)
    others = [c for c in found.candidates if c.status in ("incompatible", "unreadable")]
    for c in others:
        console.print(f"{c.status}: {c.name} ({c.origin}): {c.reason}", markup=False, soft_wrap=True)
    unfetched = [c.name for c in found.candidates if c.status == "unfetched"]
    if unfetched:
        console.print(f"not checked: {', '.join(unfetched)} (registry drafts not fetched yet: `gguf-bench download` "
                      "fetches them)", markup=False, soft_wrap=True)
    for c in (c for c in found.candidates if c.kind == "draft-mtp"):
        console.print(f"{c.kind}: {c.name}: {c.reason}", markup=False, soft_wrap=True)
    ngrams = [c.kind for c in found.candidates if c.kind in cands.NGRAM_TYPES]
    if ngrams:
        console.print(f"no draft file: {', '.join(ngrams)} (llama-server; acceptance depends on the text: "
                      "measure with tune or sweep --engine server)", markup=False, soft_wrap=True)
