"""Where llama.cpp put a model, read back from llama.cpp's own account of the load (never echoed from the options).

While a model loads and its context is created, llama.cpp logs every buffer it allocates, per buffer type:
    load_tensors: offloaded 10/19 layers to GPU
    load_tensors:   CPU_Mapped model buffer size =   202.39 MiB
    load_tensors:      Vulkan0 model buffer size =    32.77 MiB
    llama_kv_cache:    Vulkan0 KV buffer size =     3.50 MiB        (one line per cache: sliding-window and full)
    llama_context:     Vulkan0 compute buffer size =    19.71 MiB
and, at debug level, the weights it kept on the CPU although their layer was offloaded:
    tensor 'output.weight' (q8_0) (and 0 others) cannot be used with preferred buffer type Vulkan0, using CPU instead
and each weight a tensor override (-ot, -ncmoe: placing.py) sent elsewhere:
    tensor blk.0.ffn_up_exps.weight (12 MiB q4_K) buffer type overridden to CPU
`parse` turns those lines into a Placement. Buffer names are llama.cpp's: a device (Vulkan0, CUDA0), CPU, CPU_Mapped
(weights read from the mmapped file), CPU_REPACK, or a device's host buffer (Vulkan_Host, CUDA_Host); an RPC server's
device is 'RPC0[HOST:PORT]' (its own index: runtimes/rpc.buffer_names gives the client's name).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
# llama-server's lines start with a time and a level ('0.00.346.055 I '), the Python engine's do not
_BUFFER = re.compile(r"^(?:[\d.]+ [A-Z] )?\S+:\s+(\S+)\s+(model|KV|compute|output) buffer size =\s+([\d.]+) MiB")
_MOVED = re.compile(r"tensor '([^']+)' \(([^)]+)\) \(and (\d+) others\) cannot be used with preferred buffer type (\S+), "
                    r"using (\S+) instead")
_OVERRIDDEN = re.compile(r"tensor (\S+) \((\d+) MiB [^)]*\) buffer type overridden to (\S+)")
_EXPERTS = re.compile(r"^blk\.(\d+)\.ffn_(up|down|gate|gate_up)_(ch|)exps")  # placing.EXPERTS_REGEX, with the layer
HOST_BUFFERS = ("CPU", "CPU_Mapped", "CPU_REPACK", "AMX")  # buffer names that are plain host memory
REPACK = "CPU_REPACK"  # gguf-bench's own repack overrides (runtimes/repack.py) go there: not a placement


@dataclass
class Placement:
    """One model's layers and buffers, as llama.cpp reported them."""

    layers: str = "0/0"  # layers on a GPU device out of the total, as llama.cpp counts them (output layer included)
    model_mib: dict[str, float] = field(default_factory=dict)  # weights per buffer
    kv_mib: dict[str, float] = field(default_factory=dict)  # KV cache per buffer (caches of one buffer added up)
    compute_mib: dict[str, float] = field(default_factory=dict)  # the scheduler's compute buffers
    output_mib: dict[str, float] = field(default_factory=dict)  # the logits buffer
    kept_on_cpu: list[str] = field(default_factory=list)  # weights of offloaded layers llama.cpp left on the CPU
    expert_layers: dict[str, list[int]] = field(default_factory=dict)  # per buffer, layers whose experts an override sent
    overridden: dict[str, int] = field(default_factory=dict)  # other weights a tensor override sent to each buffer

    @property
    def on_gpu(self) -> int:
        return int(self.layers.split("/")[0])

    def host_expert_layers(self) -> list[int]:
        """Layers whose expert weights an override kept in host memory (the CPU's buffer, or a GPU build's pinned
        host buffer, Vulkan_Host/CUDA_Host: what llama.cpp picks for an override to CPU there)."""
        return sorted({i for name, layers in self.expert_layers.items() if not _is_device(name) for i in layers})

    def host_overridden(self) -> int:
        """Other weights an override sent to host memory."""
        return sum(n for name, n in self.overridden.items() if not _is_device(name))

    def device_mib(self) -> dict[str, float]:
        """Weights + KV + compute per non-host buffer (what a GPU must hold)."""
        out: dict[str, float] = {}
        for part in (self.model_mib, self.kv_mib, self.compute_mib):
            for name, mib in part.items():
                if _is_device(name):
                    out[name] = out.get(name, 0.0) + mib
        return out

    def summary(self) -> str:
        """'10/19 on GPU; Vulkan0 52.3 MiB (weights 32.8, KV 3.5, compute 19.7); CPU kept output.weight'."""
        parts = [f"{self.layers} layers on GPU"]
        for name, total in self.device_mib().items():
            parts.append(f"{name} {total:.1f} MiB (weights {self.model_mib.get(name, 0):.1f}, KV {self.kv_mib.get(name, 0):.1f}, "
                         f"compute {self.compute_mib.get(name, 0):.1f})")
        for name, layers in self.expert_layers.items():
            where = name if _is_device(name) else "CPU" if name == "CPU" else f"the CPU ({name})"
            parts.append(f"experts of {len(layers)} layer{'s' * (len(layers) != 1)} on {where} ({layer_spans(layers)})")
        if self.overridden:
            parts.append("overridden: " + ", ".join(f"{n} weights to {b}" for b, n in self.overridden.items()))
        if self.kept_on_cpu:
            parts.append("kept on the CPU: " + ", ".join(self.kept_on_cpu))
        return "; ".join(parts)


def layer_spans(layers: list[int] | tuple[int, ...]) -> str:
    """[0, 1, 2, 5] -> 'blk 0-2, 5'."""
    spans: list[list[int]] = []
    for i in sorted(layers):
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return "blk " + ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in spans)


def _is_device(buffer: str) -> bool:
    return buffer not in HOST_BUFFERS and not buffer.endswith("_Host")


def parse(lines: Iterable[str], n_layers: int) -> Placement:
    """The Placement of a model with `n_layers` blocks from llama.cpp's load and context log lines."""
    out = Placement(layers=f"0/{n_layers + 1}")
    parts = {"model": out.model_mib, "KV": out.kv_mib, "compute": out.compute_mib, "output": out.output_mib}
    for line in lines:
        if m := _OFFLOADED.search(line):
            out.layers = f"{m[1]}/{m[2]}"
        elif m := _BUFFER.search(line):
            part = parts[m[2]]
            part[m[1]] = round(part.get(m[1], 0.0) + float(m[3]), 2)
        elif (m := _OVERRIDDEN.search(line)) and m[3] != REPACK:
            _overridden(out, m[1], m[3])
        elif (m := _MOVED.search(line)) and _is_device(m[4]):  # from a device (not a host buffer's fallback)
            others = int(m[3])
            out.kept_on_cpu.append(f"{m[1]} ({m[2]})" + (f" and {others} more" if others else "") + f": {m[4]} -> {m[5]}")
    if out.on_gpu and not any(_is_device(name) for name in out.model_mib):  # -dev none: llama.cpp still logs
        out.layers = f"0/{out.layers.split('/')[1]}"  # 'offloaded N/N' with every weight in host memory
    return out


def _overridden(out: Placement, tensor: str, buffer: str) -> None:
    if not (m := _EXPERTS.match(tensor)):
        out.overridden[buffer] = out.overridden.get(buffer, 0) + 1
    elif int(m[1]) not in (layers := out.expert_layers.setdefault(buffer, [])):
        layers.append(int(m[1]))
