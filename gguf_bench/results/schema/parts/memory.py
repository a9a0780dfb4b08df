"""Each device's memory before and after a run, as NVML tells it (measure/trackers/device_memory.py fills it); its columns."""

from __future__ import annotations

from dataclasses import dataclass

from gguf_bench.results.schema.fields import Field


@dataclass
class DeviceMemory:
    """One device's memory in use before and after a run, as NVML tells it (measure/trackers/device_memory.py): every process's,
    and no peak in between; llama.cpp's own buffers per device are the offload's placements (Offload), not repeated."""

    device: str = ""  # 'GPU0: NVIDIA H100 80GB HBM3'
    used_before_mib: float | None = None
    used_after_mib: float | None = None
    total_mib: float | None = None


def _used_after(run) -> float | None:
    """The memory in use after the run on the fullest device it has a reading of (one device's: never a sum)."""
    known = [m.used_after_mib for m in run.memory or [] if m.used_after_mib is not None]
    return max(known) if known else None


FIELDS = (
    Field("device_used_after_mib", _used_after, "MiB", "max", numeric=True, optional=True, header="used MiB",
          fmt="{:.0f}", place=126, legend="used MiB: memory in use after the run on the fullest GPU it used, as NVML "
                                          "tells it (one device's, every process's: not a peak)"),
)
