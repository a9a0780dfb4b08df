"""What every record carries besides its measurement: the environment it ran in (store.environment) and the model
files it ran (store.models_record)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Environment:
    """What a measurement depends on besides its configuration (store.environment)."""

    gguf_bench: str | None = None
    llama_cpp_python: str | None = None
    gpu_offload: bool | None = None
    system_info: str | None = None
    python: str | None = None
    platform: str | None = None
    cpu: str | None = None
    cpu_count: int | None = None
    gpu: str | None = None
    gpu_memory: str | None = None
    gpu_count: int | None = None
    devices: list[str] = field(default_factory=list)  # the backends' own device list ('Vulkan0: llvmpipe (...)')


@dataclass
class ModelFile:
    file: str | None = None
    path: str | None = None
    size: int | None = None
    sha256: str | None = None  # one file's; None for a twin and for a split GGUF (part_sha256)
    twin: bool = False  # a twin (models/twin.py): synthetic weights, its figures are speed only, never acceptance
    part_sha256: list[str] | None = None  # a split GGUF: one sha256 per part, in order (size: every part's together)


@dataclass
class Models:
    target: ModelFile | None = None
    draft: ModelFile | None = None  # None: the target alone (n-gram drafting)
