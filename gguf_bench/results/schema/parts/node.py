"""Where a distributed sweep ran a cell (measure/distributed.py fills it)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Node:
    """Where a distributed sweep ran a cell (measure.distributed.node_info)."""

    host: str | None = None
    hostname: str | None = None
    ip: str | None = None
    ray_node_id: str | None = None
    gpu: str | None = None
    gpu_memory: str | None = None
    gpu_count: int | None = None
    gpu_ids: list[str] = field(default_factory=list)
    cpu: str | None = None
    cpu_count: int | None = None
    llama_cpp_python: str | None = None
    gpu_offload: bool | None = None
