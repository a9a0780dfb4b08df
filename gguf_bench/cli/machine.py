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
            sysbench: Annotated[bool | None, typer.Option("--sysbench/--no-sysbench", help="sysbench's read figure "
                                                          "beside it (default: where sysbench is installed)")] = None) -> None:
    """Measure the memory read bandwidth with the threads llama.cpp uses, and store it for this host: the report then
    gives each CPU row's share of the memory-bandwidth ceiling (tokens/s x bytes per token / bandwidth)."""
    err.print("measuring the memory bandwidth: keep the machine otherwise idle", markup=False)
    found = bandwidth.measure(threads, size_mib * bandwidth.MIB if size_mib else None, reps, sysbench)
    console.print(found.line(), markup=False, soft_wrap=True)
    if found.sysbench_gbs is not None:
        ratio = found.bandwidth_gbs / found.sysbench_gbs - 1
        console.print(f"sysbench memory read: {found.sysbench_gbs:.1f} GB/s ({ratio:+.0%} from it; "
                      f"{found.sysbench_command})", markup=False, soft_wrap=True)
    path = bandwidth.store(found)
    console.print(f"stored for host {found.host} in {path}", markup=False, soft_wrap=True)
