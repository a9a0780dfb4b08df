"""A run's offload: layers on the GPU and where each model's buffers went, read back from llama.cpp
(runtimes/placement.py, by either local engine); its columns."""

from __future__ import annotations

from dataclasses import dataclass

from gguf_bench.results.schema.fields import Field
from gguf_bench.runtimes.placement import Placement


@dataclass
class Offload:
    """Layers on the GPU as llama.cpp counts them ('N/total': the output layer is one more layer), and where each
    model's buffers went, both read back from llama.cpp (runtimes/placement.py); never echoed from the options."""

    target: str = "-"
    draft: str = "-"
    target_placement: Placement | None = None
    draft_placement: Placement | None = None




def run_placements(run) -> list[Placement]:
    """Where the models the run ran went (the offload's read-back): the target's, the draft's, or both."""
    if not run.offload:
        return []
    models = {"target": [run.offload.target_placement], "draft": [run.offload.draft_placement]}.get(
        str(run.mode), [run.offload.target_placement, run.offload.draft_placement])
    return [p for p in models if p is not None]


def _device_buffers(run) -> float | None:
    """llama.cpp's device buffers (MiB) of the models the run used, from the offload's read-back; None where none went
    to a device (never a zero)."""
    return sum(sum(p.device_mib().values()) for p in run_placements(run)) or None


FIELDS = (
    Field("target_offload", lambda r: (r.offload or Offload(None, None)).target, "", "first"),
    Field("draft_offload", lambda r: (r.offload or Offload(None, None)).draft, "", "first"),
    Field("buffers_mib", _device_buffers, "MiB", "max", numeric=True, optional=True, header="dev MiB", fmt="{:.0f}",
          place=125, legend="dev MiB: llama.cpp's buffers on devices (weights, KV, compute) of the models the row ran"),
)
