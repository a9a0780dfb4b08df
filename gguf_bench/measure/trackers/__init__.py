"""Trackers (optimum-benchmark's trackers/): each wraps one measured run (enter before it, exit after), reads what it
measures, and fills its part of the run's record; run_fields.RUN_FIELDS declares the columns its figures become.

    load    the machine's load over the run: the process's and the rest of the machine's CPU time (load.py)
    memory  the memory in use before and after the run on each NVIDIA device the run used, from NVML (device_memory.py);
            llama.cpp's own buffers per device are the offload's read-back (parts.offload.Offload), kept once
    energy  joules over the decode from NVML's total-energy counters and Linux powercap (RAPL) (energy.py), only where
            they cover every device the run used (devices.py); else the record says what is missing and `notes` gives
            the sweep's one line

Every engine measures each cell inside `track(grid.trackers, ...)`; adding a measurement is one tracker module here, a
line in `_make`, and its part (its record dataclass and its field declarations) in results/schema/parts/.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Protocol

from gguf_bench.measure.trackers import device_memory, energy
from gguf_bench.measure.trackers.load import LoadTracker, ServerLoadTracker
from gguf_bench.results.schema.records import RunRecord

TRACKERS = ("load", "memory", "energy")  # what a grid measures each cell with, unless it names others


class Tracker(Protocol):
    name: str

    def __enter__(self) -> Tracker: ...

    def __exit__(self, *exc) -> None: ...

    def fill(self, record: RunRecord) -> RunRecord:
        """The record with this tracker's figures (unchanged where it measured nothing)."""


class Tracked:
    """The trackers of one run, after it: `fill` puts each one's figures into the run's record; during it, `on_round`
    is the loop's callback (decoding/loop.OnRound) whose first call marks the decode's start for the trackers that
    read there (energy's `decode_starts`)."""

    def __init__(self, trackers: list[Tracker]):
        self.trackers = trackers
        self.decoding = False

    def on_round(self, tokens: list[int], from_draft: list[bool]) -> None:
        if not self.decoding:
            self.decoding = True
            for t in self.trackers:
                if hasattr(t, "decode_starts"):
                    t.decode_starts()

    def fill(self, record: RunRecord) -> RunRecord:
        for t in self.trackers:
            record = t.fill(record)
        return record


@contextmanager
def track(names: tuple[str, ...] = TRACKERS, server_pid: int | None = None) -> Iterator[Tracked]:
    """Run the block inside the named trackers (entered in order, left in reverse); server_pid: the llama-server process
    that does the work (the load tracker counts its CPU time instead of this process's)."""
    trackers = [t for t in (_make(name, server_pid) for name in names) if t is not None]
    with ExitStack() as stack:
        for t in trackers:
            stack.enter_context(t)
        yield Tracked(trackers)


def _make(name: str, server_pid: int | None) -> Tracker | None:
    """A fresh tracker, or None where it has nothing to read on this machine (memory without NVML)."""
    if name == "load":
        return ServerLoadTracker(server_pid) if server_pid is not None else LoadTracker()
    if name == "memory":
        return device_memory.MemoryTracker.if_available()
    if name == "energy":
        return energy.EnergyTracker(energy.counters(), share=server_pid is not None)
    raise ValueError(f"unknown tracker '{name}'; known: {', '.join(TRACKERS)}")


def notes(record: RunRecord, said: set[str]) -> list[str]:
    """The lines a run's trackers leave that `said` does not hold yet (added to it): a sweep says each once, not once
    per cell. The energy's: 'energy: not measured: the run used CUDA0 and the CPU; RAPL is not readable here (...)', or
    'energy: GPU only (nvml:GPU0), the CPU not counted: ...' where the GPUs' joules were stored alone (energy.note)."""
    line = energy.note(record.energy)
    lines = [line] if line and line not in said else []
    said.update(lines)
    return lines
