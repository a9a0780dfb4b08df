"""The load tracker: the machine's load over one measured run (parts.machine_load.Load), for both engines.

What judges a run is the CPU time the *rest* of the machine used while it ran: the busy time of every core (Linux
/proc/stat) minus this process's (and, for the server engine, the server's). The 1-minute load average is stored too,
but it counts the benchmark's own threads and lingers for minutes after a build has ended, so it is not judged.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import replace
from pathlib import Path

from gguf_bench.results.schema.parts.machine_load import Load
from gguf_bench.results.schema.records import RunRecord

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
RESOLUTION_TICKS = 4  # two at each end of a block, per core; summed over the cores as their square root


class LoadTracker:
    """The machine's load over a block: the CPU time the process and the calling thread got against the block's wall
    time, the CPU time every other process on the machine used (a VM's steal time among it, and apart), and the
    1-minute load average before and after. Its fields: run_fields.RUN_FIELDS' load1, main_cpu_share, cpu_share,
    cpu_count, others_cores, steal_cores."""

    name = "load"

    def __enter__(self) -> LoadTracker:
        self.load = Load(load1_before=_load1(), cpu_count=os.cpu_count())
        self._machine, self._steal = machine_busy_s(), machine_steal_s()
        self._cpu, self._main, self._wall = time.process_time(), time.thread_time(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.load.wall_s = time.perf_counter() - self._wall
        self.load.cpu_s = time.process_time() - self._cpu
        self.load.main_cpu_s = time.thread_time() - self._main
        self.load.others_cpu_s = _others(self._machine, machine_busy_s(), self.load.cpu_s)
        self.load.steal_s = _others(self._steal, machine_steal_s(), 0.0)
        self.load.load1_after = _load1()

    def fill(self, record: RunRecord) -> RunRecord:
        return replace(record, load=self.load)


class ServerLoadTracker(LoadTracker):
    """For a run inside llama-server: `cpu_s` is the server process's CPU time (every thread) instead of this one's,
    and both processes count as ours when the rest of the machine is measured; no generating-thread share (this
    process only waits for the answer)."""

    def __init__(self, pid: int):
        self.pid = pid

    def __enter__(self) -> ServerLoadTracker:
        super().__enter__()
        self._server_cpu = process_cpu_s(self.pid)
        return self

    def __exit__(self, *exc) -> None:
        super().__exit__(*exc)
        after = process_cpu_s(self.pid)
        server = after - self._server_cpu if after is not None and self._server_cpu is not None else None
        if self.load.others_cpu_s is not None and server is not None:
            self.load.others_cpu_s = max(0.0, self.load.others_cpu_s - server)
        self.load.cpu_s, self.load.main_cpu_s = server, None


def _others(before: float | None, after: float | None, own_s: float) -> float | None:
    """The machine's busy seconds over the block less this process's: what other processes used, less what /proc/stat
    cannot resolve, clamped at 0. /proc/stat samples whole clock ticks while process_time is exact, so each end may
    be off by a tick or two per core: a run of a few ticks reads 0 whatever ran beside it, and over a run of seconds
    the margin is a few hundredths of a core. The cores' sampling errors are independent, so their sum grows with the
    square root of the cores (a margin linear in them hid 1.5 cores of other work on a 64-core machine)."""
    if before is None or after is None:
        return None
    return max(0.0, after - before - own_s - RESOLUTION_TICKS * math.sqrt(os.cpu_count() or 1) / _TICK)


def machine_busy_s() -> float | None:
    """CPU seconds every core has spent busy since boot (Linux /proc/stat: user, nice, system, irq, softirq and steal,
    the last being time the hypervisor gave to other guests); None elsewhere. Idle and iowait are not busy; guest
    time is already inside user."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
        return (user + nice + system + irq + softirq + steal) / _TICK
    except (OSError, IndexError, ValueError):
        return None


def machine_steal_s() -> float | None:
    """CPU seconds the hypervisor has given other guests since boot while this VM's cores wanted to run (Linux
    /proc/stat's steal: zero on bare metal); None elsewhere. It accrues only on a core that had work, so on a quiet
    machine it is time taken from the benchmark's own threads."""
    try:
        return int(Path("/proc/stat").read_text().split("\n", 1)[0].split()[8]) / _TICK
    except (OSError, IndexError, ValueError):
        return None


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (Linux /proc), None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return None


def _load1() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None
