"""The device memory tracker: the memory in use before and after one run on each NVIDIA device the run used, from NVML
(parts.memory.DeviceMemory), one entry per device. llama.cpp's own buffers per device (weights, KV cache, compute) are read
back once per setting into the offload (runtimes/placement.py, parts.offload.Offload) and flattened from there
(run_fields.RUN_FIELDS' buffers_mib); this tracker adds what the device itself tells: every process's memory on it, and
its size. Two readings, no sampling in between: no peak (run_fields.RUN_FIELDS' device_used_after_mib says so).
"""

from __future__ import annotations

from dataclasses import replace

from gguf_bench.measure.trackers import devices
from gguf_bench.measure.trackers.nvml import Nvml, nvml
from gguf_bench.results.schema.parts.memory import DeviceMemory
from gguf_bench.results.schema.records import RunRecord

MIB = 1024 * 1024


class MemoryTracker:
    name = "memory"

    def __init__(self, nv: Nvml):
        self.nv = nv
        self.memory: list[DeviceMemory] | None = None

    @classmethod
    def if_available(cls, nv: Nvml | None = None) -> MemoryTracker | None:
        nv = nv or nvml()
        return cls(nv) if nv.module is not None else None

    def __enter__(self) -> MemoryTracker:
        self._before = self._read()
        return self

    def __exit__(self, *exc) -> None:
        after = self._read()
        if self._before is None or after is None:
            return
        self.memory = [DeviceMemory(name, b[0], a[0], a[1]) for name, b, a in zip(self.nv.names, self._before, after)]

    def _read(self) -> list[tuple[float, float]] | None:
        """(used, total) MiB per device; None where NVML fails."""
        try:
            infos = [self.nv.module.nvmlDeviceGetMemoryInfo(h) for h in self.nv.handles]
        except Exception:  # an NVMLError: no figure, never a zero
            return None
        return [(m.used / MIB, m.total / MIB) for m in infos]

    def fill(self, record: RunRecord) -> RunRecord:
        """The record with the devices it used (its CUDA devices' NVML devices: devices.nvml_index); the others not."""
        if self.memory is None:
            return record
        used = {devices.nvml_index(d, self.nv)[0] for d in devices.used(record)}
        kept = [m for i, m in enumerate(self.memory) if i in used]
        return replace(record, memory=kept) if kept else record
