"""The machine's load over one measured run (records.Load), for both engines."""

from __future__ import annotations

import os
import time
from pathlib import Path

from gguf_bench.results.records import Load


class LoadMeter:
    """The machine's load over a block: the 1-minute load average before and after, and the CPU time the process and
    the calling thread got against the block's wall time (records.Load)."""

    def __enter__(self) -> LoadMeter:
        self.load = Load(load1_before=_load1(), cpu_count=os.cpu_count())
        self._cpu, self._main, self._wall = time.process_time(), time.thread_time(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.load.wall_s = time.perf_counter() - self._wall
        self.load.cpu_s = time.process_time() - self._cpu
        self.load.main_cpu_s = time.thread_time() - self._main
        self.load.load1_after = _load1()


def _load1() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


class ServerLoadMeter(LoadMeter):
    """For a run inside llama-server: the load averages and wall time, and the CPU time of the server process
    (every thread) instead of this one's; no generating-thread share (this process only waits for the answer)."""

    def __init__(self, pid: int):
        self.pid = pid

    def __enter__(self) -> ServerLoadMeter:
        super().__enter__()
        self._server_cpu = _process_cpu_s(self.pid)
        return self

    def __exit__(self, *exc) -> None:
        super().__exit__(*exc)
        after = _process_cpu_s(self.pid)
        self.load.cpu_s = after - self._server_cpu if after is not None and self._server_cpu is not None else None
        self.load.main_cpu_s = None


def _process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (Linux /proc), None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None
