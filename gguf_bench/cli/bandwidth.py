"""`gguf-bench machine`: the memory bandwidth this machine reads at (measure/flows/bandwidth.py), stored for the report's
ceiling column (results/predictions/ceiling.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from gguf_bench.cli.app import command, console, err
from gguf_bench.cli.options import ThreadsOpt
from gguf_bench.measure.flows import bandwidth


@command
def machine(threads: ThreadsOpt = None,
            size_mib: Annotated[int | None, typer.Option("--size-mib", help="the array read, in MiB (default: 1024, or 8 "
                                                         "times the last-level cache where that is more)")] = None,
            reps: Annotated[int, typer.Option("--reps", "-r", help="repetitions; the best counts")] = bandwidth.DEFAULT_REPS,
            likwid: Annotated[bool | None, typer.Option("--likwid/--no-likwid", help="likwid-bench's read figure "
                                                        "beside it, an independent check (default: where likwid is "
                                                        "installed: apt-get install likwid)")] = None) -> None:
    """Measure the memory read bandwidth with the threads llama.cpp uses, and store it for this host: the report then
    gives each CPU row's share of the memory-bandwidth ceiling (tokens/s x bytes per token / bandwidth)."""
    likwid = bandwidth.likwid_wanted(likwid)
    err.print("measuring the memory bandwidth: keep the machine otherwise idle", markup=False)
    found = bandwidth.measure(threads, size_mib * bandwidth.MIB if size_mib else None, reps, likwid)
    console.print(found.line(), markup=False, soft_wrap=True)
    if found.likwid_gbs is not None:
        ratio = found.bandwidth_gbs / found.likwid_gbs - 1
        console.print(f"likwid-bench read: {found.likwid_gbs:.1f} GB/s, best of {found.reps} (gguf-bench's is "
                      f"{ratio:+.0%} from it; {found.likwid_command})", markup=False, soft_wrap=True)
    path = bandwidth.store(found)
    console.print(f"stored for host {found.host} in {path}", markup=False, soft_wrap=True)
