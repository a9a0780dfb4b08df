"""The memory bandwidth this machine reads at, with the threads llama.cpp decodes with: the ceiling's denominator.

Decoding reads every weight once per step, so tokens/s <= bandwidth / bytes per step (results/predictions/ceiling.py).
The kernel: one float32 array several times the last-level cache, filled first (every page mapped), split into one
contiguous slice per thread; each thread takes its slice's dot product with itself through BLAS (one read stream, and
numpy releases the GIL in it), all at once; a repetition's time runs from the threads' common start to the last one's
end, and the best repetition counts (the one least disturbed). It runs in a child process whose BLAS is held to one
thread (OPENBLAS_NUM_THREADS and its kin), so that the threads are ours and the figure is `threads`' own.

Why a dot product: a read kernel must not be slower than the memory, or the ceiling is too low and real decoding reads
above it. On a 2-core AMD EPYC VM (2026-11-29), measured in turn four times, numpy's own sum read 43-44 GB/s and BLAS's
dot 50-52 GB/s (the same array, the same threads), so the dot is the kernel. Even so, llama.cpp's decode of the F32
default target read 62 GB/s by its header's bytes a token that hour: a VM's bandwidth moves with its neighbours.
Its figure is printed beside likwid-bench's where likwid is installed (`likwid-bench -t load_avx`: an independent
implementation, RRZE's hand-written AVX load loop, pinned threads timed by their cycle counters), over the same bytes,
the same threads and the same statistic: one pass after each of the kernel's repetitions, the best of as many. On that
VM (2026-11-29, twelve runs in a row) the kernel stood +4% to +13% from it (median +10%). sysbench's read, the figure
before, averages 30 s of a C loop where the kernel keeps its best 25 ms pass, and stood 5-20% below it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
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
KERNEL = "BLAS float32 dot, one slice per thread"
ONE_BLAS_THREAD = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                          "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")}


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
    likwid_gbs: float | None = None  # the independent figure: likwid-bench's best pass, each right after one of the kernel's
    likwid_command: str | None = None

    def line(self) -> str:
        """'memory read bandwidth: 18.4 GB/s (2 threads, BLAS float32 dot, one slice per thread over 1024 MiB, best
        of 5: 58.3 ms; last-level cache 32 MiB)'."""
        llc = f"; last-level cache {self.llc_bytes / MIB:g} MiB" if self.llc_bytes else ""
        return (f"memory read bandwidth: {self.bandwidth_gbs:.1f} GB/s ({self.threads} thread"
                f"{'s' if self.threads > 1 else ''}, {self.kernel} over {self.size_bytes / MIB:g} MiB, best of "
                f"{self.reps}: {1000 * self.best_s:.1f} ms, median {1000 * self.median_s:.1f} ms{llc})")


def default_threads() -> int:
    """The threads llama.cpp decodes with when -t is not given (runtimes/llama_cpp.Model, the server engine): every
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
            likwid: bool | None = None) -> Bandwidth:
    """Read bandwidth with `threads` (default: llama.cpp's) over `size_bytes` (default: default_size), the best of
    `reps` (timed in a child process: `timed_reads`); likwid-bench's figure beside it (None: where it is installed),
    one of its passes after each of the kernel's, so that the two are measured in turn."""
    threads = threads or default_threads()
    if threads < 1 or reps < 1:
        raise ConfigError("--threads and --reps must be at least 1")
    llc = llc_bytes()
    size = size_bytes or default_size(llc)
    check = likwid_wanted(likwid)
    n_bytes, times, checks = _in_child(threads, size, reps, check)
    best = min(times)
    found = Bandwidth(bandwidth_gbs=n_bytes / best / ceiling.GB, threads=threads, size_bytes=n_bytes,
                      reps=reps, best_s=best, median_s=float(statistics.median(times)), llc_bytes=llc, cpu=_cpu(),
                      host=ceiling.this_host(), time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    if check:
        figures = [f for f in checks if f is not None]
        found = Bandwidth(**{**asdict(found), "likwid_gbs": max(figures) if figures else None,
                             "likwid_command": " ".join(likwid_command(threads, n_bytes))})
    return found


def _in_child(threads: int, size: int, reps: int, check: bool) -> tuple[int, list[float], list[float | None]]:
    """timed_reads in a child Python whose BLAS runs one thread per call (this process's BLAS has its threads already):
    (bytes read per repetition, each repetition's seconds, likwid-bench's GB/s after each where `check`)."""
    code = (f"import json, sys; from {__name__} import timed_reads; "
            f"json.dump(timed_reads({threads}, {size}, {reps}, {check}), sys.stdout)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **ONE_BLAS_THREAD})
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise BenchError(f"the bandwidth kernel failed: {last}")
    n_bytes, times, checks = json.loads(done.stdout)
    return n_bytes, times, checks


def timed_reads(threads: int, size: int, reps: int, check: bool = False) -> tuple[int, list[float], list[float | None]]:
    """The kernel itself (run by _in_child): (bytes of the array, the seconds of each repetition, and where `check`
    likwid-bench's figure over the same bytes measured right after each repetition)."""
    import numpy as np

    try:
        data = np.ones(max(threads, size // 4), dtype=np.float32)  # written once: every page mapped before timing
    except MemoryError:
        raise BenchError(f"cannot allocate {size / MIB:.0f} MiB for the bandwidth kernel: give a smaller --size-mib") from None
    slices = np.array_split(data, threads)
    times, checks = [], []
    for _ in range(reps):
        times.append(_timed(slices))
        if check:
            checks.append(likwid_read(threads, int(data.nbytes)))
    return int(data.nbytes), times, checks


def _timed(slices) -> float:
    """One repetition: every thread reads its slice (its dot product with itself), started together; the wall time
    from the start to the last end."""
    import numpy as np

    start = threading.Barrier(len(slices) + 1)
    sums = [0.0] * len(slices)

    def work(i: int) -> None:
        start.wait()
        sums[i] = float(np.dot(slices[i], slices[i]))

    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(slices))]
    for w in workers:
        w.start()
    start.wait()
    t0 = time.perf_counter()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - t0
    n = sum(len(s) for s in slices)
    if abs(sum(sums) - n) > 1e-3 * n:  # ones: the products prove every element was read (float32 sums, hence the slack)
        raise BenchError("the bandwidth kernel read wrong values")
    return elapsed


def likwid_wanted(likwid: bool | None) -> bool:
    """Whether likwid-bench's figure goes beside the kernel's: asked for (True: refused in one line where it is not
    installed), refused (False), or where it is installed (None)."""
    installed = shutil.which("likwid-bench") is not None
    if likwid and not installed:
        raise BenchError("likwid-bench is not installed (apt-get install likwid), or drop --likwid")
    return installed if likwid is None else likwid


def likwid_command(threads: int, size_bytes: int) -> list[str]:
    """likwid-bench reading `size_bytes` split between `threads` (pinned, each its slice), one pass (-i 1), as one of the
    kernel's repetitions reads."""
    return ["likwid-bench", "-t", likwid_kernel(), "-w", f"N:{size_bytes}B:{threads}", "-i", "1"]


def likwid_read(threads: int, size_bytes: int) -> float | None:
    """One likwid-bench pass's GB/s; None where it did not run or printed no figure."""
    try:
        out = subprocess.run(likwid_command(threads, size_bytes), capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_likwid(out)


def likwid_kernel(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """likwid-bench's vector load loop where the CPU has AVX (load_avx: the widest every x86-64 of the last decade
    has), else its scalar one (load)."""
    try:
        flags = next((line.split(":", 1)[1].split() for line in cpuinfo.read_text().splitlines()
                      if line.startswith("flags")), [])
    except OSError:
        flags = []
    return "load_avx" if "avx" in flags else "load"


def parse_likwid(out: str) -> float | None:
    """GB/s from likwid-bench's 'MByte/s:\t\t38947.82' (MByte: 1e6 bytes)."""
    m = re.search(r"^MByte/s:\s*([\d.]+)", out, re.M)
    return float(m[1]) / 1000 if m else None


def store(found: Bandwidth) -> Path:
    """Keep the measurement as this host's (ceiling.machine_file), beside other hosts'."""
    return ceiling.store_machine(found.host, asdict(found))


def _cpu() -> str | None:
    """The CPU model as records name it (store.environment's), so a report can tell it is this machine."""
    from gguf_bench.results.schema.store import _cpu_model

    return _cpu_model()
