"""The memory bandwidth this machine reads at, with the threads llama.cpp decodes with: the ceiling's denominator.

Decoding reads every weight once per step, so tokens/s <= bandwidth / bytes per step (results/predictions/ceiling.py).
The kernel: one float32 array several times the last-level cache, filled first (every page mapped), split into one
contiguous slice per thread; each thread sums its slice with numpy (which releases the GIL in a reduction), all at
once; a repetition's time runs from the threads' common start to the last one's end, and the best repetition counts
(the one least disturbed). Its figure is checked against `sysbench memory --memory-oper=read` where sysbench is
installed (an independent implementation: C reads of a shared buffer, same threads).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from gguf_bench.errors import BenchError, ConfigError
from gguf_bench.results.predictions import ceiling

MIB = 2**20
CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
LLC_MULTIPLE = 8  # the array is at least this many times the last-level cache
DEFAULT_SIZE = 1024 * MIB  # and at least this (1 GiB)
DEFAULT_REPS = 5
KERNEL = "numpy float32 sum, one slice per thread"


@dataclass(frozen=True)
class Bandwidth:
    """One measurement, as `gguf-bench machine` prints and stores it."""

    bandwidth_gbs: float  # bytes read / best repetition's time, in GB/s (1e9 bytes)
    threads: int
    size_bytes: int
    reps: int
    best_s: float  # the best repetition's time
    median_s: float
    llc_bytes: int | None  # the last-level cache the size was chosen against (None: not readable)
    cpu: str | None
    host: str
    time: str  # when (UTC, ISO 8601)
    kernel: str = KERNEL
    sysbench_gbs: float | None = None  # the independent figure, where sysbench ran
    sysbench_command: str | None = None

    def line(self) -> str:
        """'memory read bandwidth: 18.4 GB/s (2 threads, numpy float32 sum over 1024 MiB, best of 5: 58.3 ms; last-level
        cache 32 MiB)'."""
        llc = f"; last-level cache {self.llc_bytes / MIB:g} MiB" if self.llc_bytes else ""
        return (f"memory read bandwidth: {self.bandwidth_gbs:.1f} GB/s ({self.threads} thread"
                f"{'s' if self.threads > 1 else ''}, {self.kernel} over {self.size_bytes / MIB:g} MiB, best of "
                f"{self.reps}: {1000 * self.best_s:.1f} ms, median {1000 * self.median_s:.1f} ms{llc})")


def default_threads() -> int:
    """The threads llama.cpp decodes with when -t is not given (engines/llama_cpp.Model, the server engine): every
    core."""
    return max(1, os.cpu_count() or 1)


def llc_bytes(caches: Path = CACHES) -> int | None:
    """The last-level cache of cpu0 (the highest level's data or unified cache, /sys's index*/size: '32768K'); None
    where /sys does not say."""
    best = None
    for index in sorted(caches.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = _size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and (best is None or level >= best[0]):
            best = (level, size)
    return best[1] if best else None


def _size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)B?\s*", text)
    if not m:
        raise ValueError(text)
    return int(m[1]) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m[2]]


def default_size(llc: int | None) -> int:
    """1 GiB, or 8 times the last-level cache where that is more."""
    return max(DEFAULT_SIZE, LLC_MULTIPLE * (llc or 0))


def measure(threads: int | None = None, size_bytes: int | None = None, reps: int = DEFAULT_REPS,
            sysbench: bool | None = None) -> Bandwidth:
    """Read bandwidth with `threads` (default: llama.cpp's) over `size_bytes` (default: default_size), the best of
    `reps`; sysbench's figure beside it (None: where it is installed)."""
    import numpy as np

    threads = threads or default_threads()
    if threads < 1 or reps < 1:
        raise ConfigError("--threads and --reps must be at least 1")
    llc = llc_bytes()
    size = size_bytes or default_size(llc)
    n = max(threads, size // 4)
    try:
        data = np.ones(n, dtype=np.float32)  # written once: every page is mapped before the first timing
    except MemoryError:
        raise BenchError(f"cannot allocate {size / MIB:.0f} MiB for the bandwidth kernel: give a smaller --size-mib") from None
    slices = np.array_split(data, threads)
    times = [_timed(slices) for _ in range(reps)]
    best = min(times)
    found = Bandwidth(bandwidth_gbs=data.nbytes / best / ceiling.GB, threads=threads, size_bytes=int(data.nbytes),
                      reps=reps, best_s=best, median_s=float(np.median(times)), llc_bytes=llc, cpu=_cpu(),
                      host=ceiling.this_host(), time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    del data, slices
    if sysbench is not False and shutil.which("sysbench"):
        gbs, command = sysbench_read(threads, size)
        found = Bandwidth(**{**asdict(found), "sysbench_gbs": gbs, "sysbench_command": command})
    elif sysbench:
        raise BenchError("sysbench is not installed (apt-get install sysbench), or drop --sysbench")
    return found


def _timed(slices) -> float:
    """One repetition: every thread sums its slice, started together; the wall time from the start to the last end."""
    start = threading.Barrier(len(slices) + 1)
    sums = [0.0] * len(slices)

    def work(i: int) -> None:
        start.wait()
        sums[i] = float(slices[i].sum())

    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(slices))]
    for w in workers:
        w.start()
    start.wait()
    t0 = time.perf_counter()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - t0
    if sum(sums) != sum(len(s) for s in slices):  # ones: the sums prove every element was read
        raise BenchError("the bandwidth kernel read wrong values")
    return elapsed


def sysbench_read(threads: int, size_bytes: int) -> tuple[float | None, str]:
    """sysbench's sequential read bandwidth (GB/s) over one shared buffer of `size_bytes`, with `threads`, and its
    command line; None where it did not run or printed no figure."""
    block = max(1, size_bytes // MIB)
    command = ["sysbench", "memory", f"--threads={threads}", f"--memory-block-size={block}M", "--memory-scope=global",
               "--memory-oper=read", "--memory-access-mode=seq", f"--memory-total-size={block * threads * 8}M",
               "--time=30", "run"]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return None, " ".join(command)
    return parse_sysbench(out), " ".join(command)


def parse_sysbench(out: str) -> float | None:
    """GB/s from sysbench memory's '102400.00 MiB transferred (12345.67 MiB/sec)'."""
    m = re.search(r"\(([\d.]+) MiB/sec\)", out)
    return float(m[1]) * MIB / ceiling.GB if m else None


def store(found: Bandwidth) -> Path:
    """Keep the measurement as this host's (ceiling.machine_file), beside other hosts'."""
    return ceiling.store_machine(found.host, asdict(found))


def _cpu() -> str | None:
    """The CPU model as records name it (store.environment's), so a report can tell it is this machine."""
    from gguf_bench.results.schema.store import _cpu_model

    return _cpu_model()
