"""The energy tracker: joules over a run's decode, read from energy counters (parts.energy_spent.Energy), stored only where the
counters cover every device the run used.

NVIDIA devices: NVML's total-energy counter (nvmlDeviceGetTotalEnergyConsumption, millijoules since the driver loaded,
Volta and newer), better than sampling power for runs of a few seconds (power is a 1-second average on Ampere and
newer). CPUs: Linux powercap (RAPL) packages, /sys/class/powercap/intel-rapl:N/energy_uj (microjoules; AMD Zen exposes
the same on recent kernels), which wraps at max_energy_range_uj and is readable by root only on most kernels. Both are
whole-device counters: the idle draw and any other process's work in the window are in the figure.

Coverage (devices.py): the run used the CPU (always) and each device its models have buffers on. The CPU needs the RAPL
packages, a CUDA device its own NVML device's counter; a Vulkan or RPC device has none here. Where one device has no
counter, the run stores the counters it read and the devices it used, no joules (never a part of the run's energy), and
`missing` says what was left out; `notes` turns that into the sweep's one line. The GPUs a run did not use are not added.

GPU only: where the counters read every GPU the run used and only the CPU is left out (NVML, and RAPL absent or
readable by root only: most GPU users), the GPUs' joules are stored apart (Energy.gpu_joules), never as the run's, and
the sweep's line says the CPU was not counted and how to count it.

The window (parts.energy_spent.Energy.window): the Python engine marks the first token after the prompt (Tracked.on_round), so the
joules cover the decode, the window of tokens/s, and the prompt's are stored apart. llama-server answers a request whole:
its joules are the request's times the decode's share of the request's time (even power assumed; prompt processing
usually draws more, so this leans high); for a round of several clients, tokens/s covers the whole round, and so do
the joules.
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from gguf_bench.measure.trackers import devices
from gguf_bench.measure.trackers.nvml import Nvml, nvml
from gguf_bench.results.schema.parts.energy_spent import SHARE_WINDOW, Energy
from gguf_bench.results.schema.records import RunRecord

POWERCAP = Path("/sys/class/powercap")
_PACKAGE = re.compile(r"^intel-rapl:\d+$")  # a package zone; its subzones (intel-rapl:0:0, core, uncore) are inside it


class Counter(Protocol):
    kind: str  # 'rapl' or 'nvml'
    domains: list[str]  # 'rapl:package-0', 'nvml:GPU0'

    def read(self) -> list[float]:
        """Each domain's counter now, in its own unit."""

    def joules(self, before: list[float], after: list[float]) -> list[float | None]:
        """What each domain spent between two readings, in joules (None: not a measurement)."""


class NvmlCounter:
    """Each NVIDIA device's total-energy counter (mJ, never going down while the driver stays loaded)."""

    kind = "nvml"

    def __init__(self, nv: Nvml):
        self.nv, self.domains = nv, [f"nvml:{name.split(':')[0]}" for name in nv.names]

    def read(self) -> list[float]:
        return [float(self.nv.module.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self.nv.handles]

    def joules(self, before: list[float], after: list[float]) -> list[float | None]:
        return [(a - b) / 1e3 if a >= b else None for b, a in zip(before, after)]


class RaplCounter:
    """Linux powercap packages (µJ), each wrapping at its max_energy_range_uj."""

    kind = "rapl"

    def __init__(self, zones: list[Path], ranges: list[int]):
        self.zones, self.ranges = zones, ranges
        self.domains = [f"rapl:{_text(z / 'name') or z.name}" for z in zones]

    def read(self) -> list[float]:
        return [float(int((z / "energy_uj").read_text())) for z in self.zones]

    def joules(self, before: list[float], after: list[float]) -> list[float | None]:
        return [(a - b if a >= b else a + top - b) / 1e6 for b, a, top in zip(before, after, self.ranges)]


def rapl_counter(root: Path = POWERCAP) -> tuple[RaplCounter | None, str]:
    """The RAPL packages under `root` (a sysfs powercap folder), readable now; else None and why not."""
    if not root.is_dir():
        return None, f"no RAPL ({root} does not exist: no CPU energy counter on this machine, as on most virtual machines)"
    zones = sorted(z for z in root.iterdir() if _PACKAGE.match(z.name) and (z / "energy_uj").exists())
    if not zones:
        return None, f"no RAPL (no package zone in {root})"
    try:
        counter = RaplCounter(zones, [int((z / "max_energy_range_uj").read_text()) for z in zones])
        counter.read()
    except (OSError, ValueError) as exc:
        return None, (f"RAPL is not readable here ({exc.__class__.__name__}: needs root on most kernels; to count the "
                      f"CPU, run as root or `sudo chmod o+r {root}/intel-rapl:*/energy_uj` (until the next boot))")
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


@dataclass
class Found:
    """This machine's readable counters, why each kind that is not ('rapl', 'nvml') is not, and NVML's devices."""

    counters: list[Counter]
    why: dict[str, str] = field(default_factory=dict)
    nv: Nvml = Nvml(None)


def find_counters(nv: Nvml, root: Path = POWERCAP) -> Found:
    """Every readable counter (NVML's devices and the CPU packages) and why the others are not."""
    found = Found([], nv=nv)
    for kind, (counter, reason) in (("nvml", nvml_counter(nv)), ("rapl", rapl_counter(root))):
        if counter is not None:
            found.counters.append(counter)
        else:
            found.why[kind] = reason
    return found


@functools.cache
def counters() -> Found:
    """This machine's counters (looked for once per process)."""
    return find_counters(nvml())


def cover(used: list[str], found: Found) -> tuple[list[str], list[str]]:
    """The counters that read the devices a run used, and why each device that none reads is left out."""
    read = [d for c in found.counters for d in c.domains]
    need: list[str] = []
    why: list[str] = []
    for device in used:
        names, reason = _covering(device, read, found)
        need += names
        why += [reason] if not names else []
    return need, list(dict.fromkeys(why))


def _covering(device: str, read: list[str], found: Found) -> tuple[list[str], str]:
    if device == devices.CPU:
        packages = [d for d in read if d.startswith("rapl:")]
        return packages, found.why.get("rapl", "")
    if device.startswith("CUDA"):
        if found.nv.module is None or "nvml" in found.why:
            return [], found.why.get("nvml", found.nv.why_not)
        index, reason = devices.nvml_index(device, found.nv)
        return ([f"nvml:GPU{index}"], "") if index is not None else ([], reason)
    if device.startswith("RPC"):
        return [], f"{device} is an RPC server's device (no counter here reads it)"
    return [], f"no counter here reads {device} (NVML's devices are matched to CUDA's only)"


Reading = tuple[dict[str, float] | None, float]  # each domain's counter (None: a read failed) and perf_counter()


class EnergyTracker:
    """Each counter read when the block starts, at the decode's first token where the engine marks it, and when the
    block ends; `fill` keeps the joules of the devices the record says the run used. share: the engine does not mark
    (llama-server), the decode's joules are the block's share (module docstring)."""

    name = "energy"

    def __init__(self, found: Found, share: bool = False):
        self.found, self.share = found, share
        self.readings: list[Reading] = []

    def __enter__(self) -> EnergyTracker:
        self.readings = [self._read()]
        return self

    def decode_starts(self) -> None:
        """The first token after the prompt: the prompt's window ends and the decode's begins (once per run)."""
        if len(self.readings) == 1:
            self.readings.append(self._read())

    def __exit__(self, *exc) -> None:
        self.readings.append(self._read())

    def _read(self) -> Reading:
        values: dict[str, float] = {}
        try:
            for c in self.found.counters:
                values.update(zip(c.domains, c.read()))
        except Exception:  # OSError from sysfs, NVMLError from the driver: this reading is not one
            return None, time.perf_counter()
        return values, time.perf_counter()

    def fill(self, record: RunRecord) -> RunRecord:
        return replace(record, energy=self.energy(record))

    def energy(self, record: RunRecord) -> Energy:
        """Joules only where the counters read cover every device the run used; else what they left out, and the GPUs'
        joules alone where only the CPU is (gpu_joules)."""
        used = devices.used(record)
        need, why = cover(used, self.found)
        base = Energy(counters=[d for c in self.found.counters for d in c.domains], devices=used)
        if why:
            return self._gpu_only(replace(base, missing=f"the run used {devices.listed(used)}; {'; '.join(why)}"), record)
        if record.metrics is None:  # a failed run: nothing to divide
            return base
        measured = self._window(base, need, record)
        if measured.joules is None:
            return replace(base, missing=measured.missing or f"{'+'.join(need)} could not be read over the run")
        return replace(measured, source="+".join(need))

    def _gpu_only(self, base: Energy, record: RunRecord) -> Energy:
        """`base` (no joules: a device left out) with the joules of the GPUs the run used, where the counters read
        each of them and only the CPU is left out; else `base` as it is."""
        gpus = [d for d in base.devices if d != devices.CPU]
        need, why = cover(gpus, self.found)
        if not gpus or why or record.metrics is None:
            return base
        measured = self._window(base, need, record)
        if measured.joules is None:
            return base
        return replace(base, gpu_joules=measured.joules, gpu_prompt_joules=measured.prompt_joules,
                       gpu_source="+".join(need), wall_s=measured.wall_s, window=measured.window)

    def _window(self, base: Energy, need: list[str], record: RunRecord) -> Energy:
        """The decode's joules: between the mark and the end (the prompt's apart), or the block's share."""
        start, end = self.readings[0], self.readings[-1]
        if len(self.readings) == 3:
            mark = self.readings[1]
            return replace(base, joules=self._spent(need, mark, end), wall_s=end[1] - mark[1],
                           prompt_joules=self._spent(need, start, mark))
        if not self.share:
            return replace(base, missing="the run generated no token (no decode window)")
        wall, joules, decode_s = end[1] - start[1], self._spent(need, start, end), record.metrics.decode_s
        if joules is None or not decode_s or wall <= 0:
            return base
        return replace(base, joules=joules * min(1.0, decode_s / wall), wall_s=wall, window=SHARE_WINDOW)

    def _spent(self, need: list[str], before: Reading, after: Reading) -> float | None:
        """The joules of the `need` domains between two readings; None where a reading failed or a domain went back."""
        if before[0] is None or after[0] is None:
            return None
        spent: list[float | None] = []
        for c in self.found.counters:
            pairs = zip(c.domains, c.joules([before[0][d] for d in c.domains], [after[0][d] for d in c.domains]))
            spent += [j for d, j in pairs if d in need]
        return sum(spent) if spent and None not in spent else None


def note(spent: Energy | None) -> str | None:
    """The sweep's line for a run's energy where a device was left out: 'energy: not measured: WHY', or, where the GPUs'
    joules were stored alone, that they are the GPUs' only and why the CPU is not counted (the reason says how to)."""
    if spent is None or not spent.missing:
        return None
    if spent.gpu_joules is None:
        return f"energy: not measured: {spent.missing}"
    return f"energy: GPU only ({spent.gpu_source}), the CPU not counted: {spent.missing}"


def _text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""

