"""The one shape every engine has.

An engine opens a setting (loads the pair, or prepares to start llama-server), measures cells into records, and
closes, as llama.cpp's drafting types share begin/draft/accept and optimum-benchmark's backends share
load/prefill/generate. The sweep, tune's --check and the Ray units reach engines only through what is measured
(measure/measured.py: its `engine`), `run_unit` and `measure_unit`. Adding an engine: a module with a class of this
shape, and its line in gguf_bench/engine_registry.KINDS (its name, capabilities, titles, this class and its tune
calibration).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Protocol

from gguf_bench.engine_registry import Capabilities
from gguf_bench.measure.inputs.prepared import PreparedPrompts
from gguf_bench.measure.plan import Cell, Grid, Setting, Unit, per_repetition
from gguf_bench.models.pairs import PairChoice
from gguf_bench.results.schema.parts.order import LOADS_EACH, Order
from gguf_bench.results.schema.records import RunRecord


class Session(Protocol):
    """One setting, open: the models loaded (or the server's binary checked, its processes started as cells need)."""

    design: str  # how order() interleaves the runs a verdict compares (parts.order.Order.design)

    def order(self, cells: list[Cell]) -> list[Cell]:
        """The cells in the order this engine measures them: the runs a verdict compares close in time, in an order that
        favours no side (plan.shuffled, plan.counterbalanced)."""

    def measure(self, cell: Cell) -> RunRecord:
        """The cell's record: its figures, or the reason it could not be measured (never raises for a failed run)."""

    def close(self) -> None: ...


class Engine(Protocol):
    name: str
    capabilities: Capabilities  # what it can do (engine_registry): the plan asks these, never the name

    @staticmethod
    def measured(grid: Grid, choice: PairChoice, fetch: Callable) -> list[tuple[str, object]]:
        """What a sweep measures, resolved from the command, each with its name: the pairs on this machine (fetched by
        `fetch`: pair.local_pairs), or the servers at the engine's URLs (measured.SweepSubject)."""

    def open(self, setting: Setting, prompts: PreparedPrompts) -> Session: ...


def run_unit(engine: Engine, unit: Unit, prompts: PreparedPrompts) -> Iterator[RunRecord]:
    """Each cell of one setting, measured in the engine's order (measure_unit); the setting is closed on every way
    out. --loads each: opened again for each repetition (plan.per_repetition), as the local sweep does."""
    chunks = per_repetition([unit]) if unit.setting.grid.loads == LOADS_EACH else [unit]
    first = 0
    for chunk in chunks:
        session = engine.open(chunk.setting, prompts)
        try:
            for record in measure_unit(session, chunk, first=first):
                first += 1
                yield record
        finally:
            session.close()


def measure_unit(session: Session, unit: Unit, settings: str | None = None, first: int = 0) -> Iterator[RunRecord]:
    """The unit's cells through a session open on its setting, in the engine's order, each record stamped with where it
    stood (parts.order.Order: when it started and ended; `settings`: how the sweep's settings took turns, `first`: the
    position of the unit's first cell in its setting's order, where a unit is one chunk of it)."""
    for position, cell in enumerate(session.order(unit.cells), first):
        started = time.time()
        record = session.measure(cell)
        grid = unit.setting.grid
        record.order = Order(session.design, position, grid.seed, round(started, 3), grid.looks, round(time.time(), 3),
                             settings, grid.invocation, grid.loads, grid.margin, grid.objective)
        yield record
