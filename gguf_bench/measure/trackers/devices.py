"""Which devices a run used, read from its record (the offload's read-back: the buffers llama.cpp allocated for the models
the run ran), and which NVML device a CUDA device is.

The CPU is one in every run: the host runs the loop, the sampling and llama.cpp's input embeddings, whatever the
offload. A device buffer names each other one, as llama.cpp numbers the devices its process sees (CUDA_VISIBLE_DEVICES
and GGML_VK_VISIBLE_DEVICES already applied): CUDA0, Vulkan0, RPC0[HOST:PORT] (an RPC server's device).

CUDA device i is the i-th entry of CUDA_VISIBLE_DEVICES (every device where it is unset). A GPU-UUID entry is matched
with NVML's UUIDs; an index is NVML's index only where CUDA counts in NVML's (PCI bus) order: CUDA_DEVICE_ORDER=PCI_BUS_ID,
or a machine with one GPU (CUDA's default order puts the fastest first and leaves the rest unspecified).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from gguf_bench.measure.trackers.nvml import Nvml
from gguf_bench.results.schema.parts.offload import run_placements
from gguf_bench.results.schema.records import RunRecord

CPU = "CPU"
_CUDA = re.compile(r"^CUDA(\d+)$")


def used(record: RunRecord) -> list[str]:
    """'CPU' and each device the models the run ran have buffers on, in llama.cpp's names ('CUDA0', 'Vulkan0')."""
    return [CPU, *sorted({name for p in run_placements(record) for name in p.device_mib()})]


def listed(devices: list[str]) -> str:
    """'CUDA0 and the CPU', 'the CPU'."""
    names = [d for d in devices if d != CPU] + (["the CPU"] if CPU in devices else [])
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 2 else names)


def nvml_index(device: str, nv: Nvml, env: Mapping[str, str] = os.environ) -> tuple[int | None, str]:
    """NVML's index of a CUDA device ('CUDA1'), else None and why it cannot be told."""
    match = _CUDA.match(device)
    if match is None:
        return None, f"{device} is not a CUDA device"
    entries = _visible(env, len(nv.handles))
    i = int(match.group(1))
    if i >= len(entries):
        return None, f"{device} is not among CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')}"
    entry = entries[i]
    if entry.startswith("GPU-"):
        j = _by_uuid(entry, nv)
        return j, "" if j is not None else f"no NVML device has the UUID {entry}"
    if not entry.isdigit() or int(entry) >= len(nv.handles):
        return None, f"NVML has no device for {device} (CUDA_VISIBLE_DEVICES entry '{entry}')"
    if len(nv.handles) > 1 and env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        return None, (f"which NVML device is {device} cannot be told with {len(nv.handles)} GPUs in CUDA's default "
                      "order (set CUDA_DEVICE_ORDER=PCI_BUS_ID)")
    return int(entry), ""


def _visible(env: Mapping[str, str], count: int) -> list[str]:
    """CUDA_VISIBLE_DEVICES' entries (every NVML index where it is unset)."""
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return [str(i) for i in range(count)]
    return [e.strip() for e in value.split(",") if e.strip()]


def _by_uuid(entry: str, nv: Nvml) -> int | None:
    for j, handle in enumerate(nv.handles):
        try:
            uuid = nv.module.nvmlDeviceGetUUID(handle)
        except Exception:  # an NVMLError: not this one
            continue
        if (uuid.decode() if isinstance(uuid, bytes) else str(uuid)).startswith(entry):
            return j
    return None
