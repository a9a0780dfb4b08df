"""The energy tracker: joules over one run, read from energy counters before and after it (records.Energy).

NVIDIA devices: NVML's total-energy counter (nvmlDeviceGetTotalEnergyConsumption, millijoules since the driver loaded,
Volta and newer), better than sampling power for runs of a few seconds (power is a 1-second average on Ampere and
newer). CPUs: Linux powercap (RAPL) packages, /sys/class/powercap/intel-rapl:N/energy_uj (microjoules; AMD Zen exposes
the same on recent kernels), which wraps at max_energy_range_uj and is readable by root only on most kernels. Both are
whole-device counters: the idle draw and any other process's work over the run are in the figure.

Where no counter is readable (a VM: no /sys/class/powercap, no GPU), `EnergyTracker.if_available` is None, nothing is
stored (never a zero), and `unavailable` gives the one line a sweep prints.
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from gguf_bench.measure.trackers.nvml import Nvml, nvml
from gguf_bench.results.records import Energy, RunRecord

POWERCAP = Path("/sys/class/powercap")
_PACKAGE = re.compile(r"^intel-rapl:\d+$")  # a package zone; its subzones (intel-rapl:0:0, core, uncore) are inside it


class Counter(Protocol):
    source: str
    domains: list[str]

    def read(self) -> list[float]:
        """Each domain's counter now, in its own unit."""

    def joules(self, before: list[float], after: list[float]) -> float:
        """What the domains spent between two readings, in joules."""


class NvmlCounter:
    """Each NVIDIA device's total-energy counter (mJ)."""

    source = "nvml"

    def __init__(self, nv: Nvml):
        self.nv, self.domains = nv, [name.split(":")[0] for name in nv.names]

    def read(self) -> list[float]:
        return [float(self.nv.module.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self.nv.handles]

    def joules(self, before: list[float], after: list[float]) -> float:
        return sum(a - b for b, a in zip(before, after)) / 1e3


class RaplCounter:
    """Linux powercap packages (µJ), each wrapping at its max_energy_range_uj."""

    source = "rapl"

    def __init__(self, zones: list[Path]):
        self.zones = zones
        self.domains = [_read(z / "name", z.name) for z in zones]
        self.ranges = [int(_read(z / "max_energy_range_uj", "0")) for z in zones]

    def read(self) -> list[float]:
        return [float(int((z / "energy_uj").read_text())) for z in self.zones]

    def joules(self, before: list[float], after: list[float]) -> float:
        return sum(a - b if a >= b else a + top - b for b, a, top in zip(before, after, self.ranges)) / 1e6


def rapl_counter(root: Path = POWERCAP) -> tuple[RaplCounter | None, str]:
    """The RAPL packages under `root` (a sysfs powercap folder), readable now; else None and why not."""
    if not root.is_dir():
        return None, f"no RAPL ({root} does not exist)"
    zones = sorted(z for z in root.iterdir() if _PACKAGE.match(z.name) and (z / "energy_uj").exists())
    if not zones:
        return None, f"no RAPL (no package zone in {root})"
    counter = RaplCounter(zones)
    try:
        counter.read()
    except (OSError, ValueError) as exc:
        return None, f"RAPL not readable ({exc.__class__.__name__}: energy_uj is root's only on most kernels)"
    return counter, ""


def nvml_counter(nv: Nvml) -> tuple[NvmlCounter | None, str]:
    """The NVIDIA devices' energy counters; else None and why not (no NVML, or a device older than Volta)."""
    if nv.module is None:
        return None, nv.why_not
    counter = NvmlCounter(nv)
    try:
        counter.read()
    except Exception as exc:  # pynvml.NVMLError_NotSupported before Volta
        return None, f"NVML has no energy counter here ({type(exc).__name__})"
    return counter, ""


def find_counters(nv: Nvml, root: Path = POWERCAP) -> tuple[list[Counter], str]:
    """Every readable counter (NVML's devices and the CPU packages: a run spends on both), and why the others are not."""
    found, why = [], []
    for counter, reason in (nvml_counter(nv), rapl_counter(root)):
        if counter is not None:
            found.append(counter)
        else:
            why.append(reason)
    return found, "; ".join(why)


@functools.cache
def counters() -> tuple[list[Counter], str]:
    """This machine's counters (looked for once per process)."""
    return find_counters(nvml())


def unavailable() -> str | None:
    """The line a sweep prints once where no energy counter is readable; None where one is."""
    found, why = counters()
    return None if found else f"energy: not measured, no energy counter on this machine ({why})"


class EnergyTracker:
    """Joules over the block: each counter read before and after, the differences added up."""

    name = "energy"

    def __init__(self, counters: list[Counter]):
        self.counters = counters
        self.energy: Energy | None = None

    @classmethod
    def if_available(cls) -> EnergyTracker | None:
        found, _ = counters()
        return cls(found) if found else None

    def __enter__(self) -> EnergyTracker:
        self._before = self._read()
        self._wall = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        after, wall = self._read(), time.perf_counter() - self._wall
        if self._before is None or after is None:
            return  # a counter that failed mid-sweep: no figure, never a zero
        joules = sum(c.joules(b, a) for c, b, a in zip(self.counters, self._before, after))
        self.energy = Energy(joules=joules, source="+".join(c.source for c in self.counters),
                             domains=[d for c in self.counters for d in c.domains], wall_s=wall)

    def _read(self) -> list[list[float]] | None:
        try:
            return [c.read() for c in self.counters]
        except Exception:  # OSError from sysfs, NVMLError from the driver
            return None

    def fill(self, record: RunRecord) -> RunRecord:
        return replace(record, energy=self.energy) if self.energy is not None else record


def _read(path: Path, default: str) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return default
