"""The parts of a run's record, each beside its own columns: one module per part (its dataclass, the figures read
from it, and its `FIELDS`), filled by the engine or tracker its docstring names. `RUN_PARTS` is the table the record
and `run_fields.RUN_FIELDS` walk: a new part is its module and one line here (and its attribute on `RunRecord`, which
tests/test_fields.py holds to this table).

They live in the stored schema rather than beside the trackers (measure/trackers/) and engines (measure/) that fill
them because `report` reads records without importing what measures them (tests/test_layout.py's layers).
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf_bench.results.schema.fields import Field
from gguf_bench.results.schema.parts import (
    endpoint_identity,
    energy_spent,
    machine_load,
    memory,
    node,
    offload,
    order,
    provenance,
    server_process,
)


@dataclass(frozen=True)
class Part:
    """One optional part of a run's record: its attribute on RunRecord, its type and its columns."""

    name: str
    cls: type
    fields: tuple[Field, ...] = ()


RUN_PARTS: tuple[Part, ...] = (
    Part("offload", offload.Offload, offload.FIELDS),
    Part("node", node.Node),
    Part("load", machine_load.Load, machine_load.FIELDS),
    Part("server", server_process.Server, server_process.FIELDS),
    Part("endpoint", endpoint_identity.Endpoint),
    Part("energy", energy_spent.Energy, energy_spent.FIELDS),
    Part("memory", memory.DeviceMemory, memory.FIELDS),  # a list: one per device
    Part("order", order.Order, order.FIELDS),
    Part("build", provenance.Build, provenance.BUILD_FIELDS),
)
