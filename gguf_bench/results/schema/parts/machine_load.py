"""The machine's load over a run (measure/trackers/load.py fills it); its columns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gguf_bench.results.schema.fields import Field


@dataclass
class Load:
    """The load one run measured under (measure/trackers/load.py): the CPU time the process (every thread) and its
    generating thread got against the run's wall time, the CPU time the rest of the machine used meanwhile, and the
    1-minute load average before and after (stored, not judged: it counts the run's own threads)."""

    load1_before: float | None = None
    load1_after: float | None = None
    wall_s: float | None = None
    cpu_s: float | None = None  # the process: every thread, llama.cpp's included
    main_cpu_s: float | None = None  # the thread that generates (Python, and llama.cpp's worker 0)
    cpu_count: int | None = None
    others_cpu_s: float | None = None  # every other process on the machine (for the server engine: but the server)
    steal_s: float | None = None  # CPU time the hypervisor gave other guests while this VM's cores wanted to run
    # (/proc/stat's steal; inside others_cpu_s too); None: not measured (records before it, not Linux)

    @property
    def load1(self) -> float | None:
        """The higher of the two load averages."""
        known = [x for x in (self.load1_before, self.load1_after) if x is not None]
        return max(known) if known else None

    @property
    def main_share(self) -> float | None:
        """The generating thread's CPU time over wall time: about 1 on a CPU-only run with the machine to itself (it
        runs Python or computes, spinning at llama.cpp's barriers); well below 1 when it had to wait for a core."""
        return self.main_cpu_s / self.wall_s if self.wall_s and self.main_cpu_s is not None else None

    @property
    def others_cores(self) -> float | None:
        """How many cores the rest of the machine kept busy, on average over the run (0.5: half of one core)."""
        return self.others_cpu_s / self.wall_s if self.wall_s and self.others_cpu_s is not None else None

    @property
    def steal_cores(self) -> float | None:
        """How many cores the VM's neighbours took from this machine while it wanted them, on average over the run."""
        return self.steal_s / self.wall_s if self.wall_s and self.steal_s is not None else None




def _load(get: Callable[[Load], object]) -> Callable:
    return lambda run: get(run.load) if run.load else None


FIELDS = (
    Field("load1", _load(lambda lo: lo.load1), "", "max", numeric=True),
    Field("main_cpu_share", _load(lambda lo: lo.main_share), "", "min", numeric=True),
    Field("cpu_count", lambda r: (r.load.cpu_count if r.load else None) or r.env.cpu_count, "cores", "max", numeric=True),
    Field("others_cores", _load(lambda lo: lo.others_cores), "cores", "max", numeric=True),
    Field("steal_cores", _load(lambda lo: lo.steal_cores), "cores", "max", numeric=True, optional=True),
    Field("cpu_share", _load(lambda lo: lo.cpu_s / lo.wall_s if lo.wall_s and lo.cpu_s is not None else None)),
)
