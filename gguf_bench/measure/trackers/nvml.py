"""NVIDIA's management library, if it is there: `nvidia-ml-py` (imports as pynvml; the optional [gpu] extra), imported
lazily and initialised once per process. Without the package, the driver or a device, `devices()` is empty and
`why_not()` says why; nothing raises.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Nvml:
    module: ModuleType | None  # pynvml, initialised; None where it could not be
    handles: tuple = ()
    names: tuple[str, ...] = ()  # 'GPU0: NVIDIA H100 80GB HBM3'
    why_not: str = ""


def open_nvml(module: ModuleType | None = None) -> Nvml:
    """NVML with its devices; `module`: a stand-in for pynvml (tests), else the real one imported here."""
    if module is None:
        try:
            import pynvml as module  # noqa: PLC0415 (optional: the [gpu] extra)
        except ImportError:
            return Nvml(None, why_not="no NVML (the nvidia-ml-py package is not installed: pip install 'gguf-bench[gpu]')")
    try:
        module.nvmlInit()
        handles = tuple(module.nvmlDeviceGetHandleByIndex(i) for i in range(module.nvmlDeviceGetCount()))
        names = tuple(f"GPU{i}: {_text(module.nvmlDeviceGetName(h))}" for i, h in enumerate(handles))
    except Exception as exc:  # pynvml.NVMLError_LibraryNotFound, _DriverNotLoaded, ...: no NVIDIA device here
        return Nvml(None, why_not=f"no NVML device ({type(exc).__name__}: {exc})")
    if not handles:
        return Nvml(None, why_not="no NVML device (NVML counts none)")
    return Nvml(module, handles, names)


@functools.cache
def nvml() -> Nvml:
    """This process's NVML (opened once)."""
    return open_nvml()


def _text(name) -> str:
    return name.decode() if isinstance(name, bytes) else str(name)
