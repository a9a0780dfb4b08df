"""What a sweep measures, as the engine resolves it from the command: a pair's local files (`LocalPair`, the Python
loop and llama-server), or servers someone else started (engines/endpoint.Servers). The one sweep loop
(measure/sweep.py: `run_sweep`, `Measuring`, -r auto, --resume and the lock) asks it for its checks, the fixed parts of
its records, its cells and its engines, and never asks which kind it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from gguf_bench import engine_registry
from gguf_bench.errors import ConfigError
from gguf_bench.measure import capacity
from gguf_bench.measure.engines.protocol import Engine
from gguf_bench.measure.inputs.prepared import PreparedPrompts, sized_context
from gguf_bench.measure.pair import LoadConfig, PairFiles, check_compatible
from gguf_bench.measure.plan import Cell, Grid, Plan, Setting, expand
from gguf_bench.results.schema.store import environment, models_record

Only = Callable[[Setting, Cell], bool] | None


class SweepSubject(Protocol):
    """What one sweep measures (a local pair, or the servers at --url and --baseline-url), as the sweep loop asks it."""

    name: str  # the results' pair: every record's `pair`, and what --resume finds a sweep's cells by (set by prepare)

    def check_stored(self, stored: list, out: Path) -> None:
        """One line where continuing `out` (--resume) would mix these runs with others; before anything else."""

    def prepare(self, grid: Grid, note: Callable[[str], None]) -> tuple[Grid, PreparedPrompts]:
        """Every check before anything loads; the grid as it will run (its context sized) and the prompts."""

    def static(self, sweep: str) -> dict:
        """What every record of the sweep carries (sweep, pair, environment, models)."""

    def plan(self, grid: Grid, static: dict, skip: set[str], only: Only) -> Plan:
        """The cells to measure now, by setting: those not in `skip` (and that `only` selects)."""

    def engine(self, name: str, grid: Grid) -> Engine:
        """The engine that opens this sweep's settings."""

    def does_not_fit(self, load: LoadConfig, n_ctx: int) -> str | None:
        """Why a setting cannot be loaded here (its records keep the reason), or None."""

    def side_by_side(self, loads: list[LoadConfig], n_ctx: int) -> bool:
        """Whether several settings can be held loaded at once."""


class LocalPair:
    """A target (and draft) on this machine: checked, its prompts tokenized by the target, its settings planned against
    the machine's memory, each engine of the registry opened on its files."""

    def __init__(self, files: PairFiles):
        self.files, self.name = files, files.name
        self.budget = None

    def check_stored(self, stored: list, out: Path) -> None:
        return None  # the cells' keys name the files: another pair's runs in the file are other cells

    def prepare(self, grid: Grid, note: Callable[[str], None]) -> tuple[Grid, PreparedPrompts]:
        files = self.files
        if files.draft is not None:
            check_compatible(files)
        for s in grid.strategies:  # a target alone (no --draft) drafts by n-gram only
            s.check(max(grid.ks), has_draft_model=files.draft is not None)
        prompts = PreparedPrompts.for_target(files.target, grid.prompts, max(grid.depths))
        n_ctx, line = sized_context(files, prompts, n_ctx=grid.n_ctx, depth=max(grid.depths),
                                    n_predict=grid.n_predict, verify=grid.k_max_any_engine)
        grid = replace(grid, n_ctx=n_ctx)
        if line:
            note(line)
        capacity.check_memory(files, grid)
        for line in capacity.check_placements(files, grid.placings, grid.placings_draft,
                                              any(engine_registry.of(e).rpc_checked_here for e in grid.engines)):
            note(line)
        self.budget = capacity.device_budget(grid)
        return grid, prompts

    def static(self, sweep: str) -> dict:
        return {"sweep": sweep, "pair": self.files.name, "env": environment(),
                "models": models_record(self.files.target, self.files.draft)}

    def plan(self, grid: Grid, static: dict, skip: set[str], only: Only) -> Plan:
        return expand(self.files, grid, static, skip, only)

    def engine(self, name: str, grid: Grid) -> Engine:
        """The engine called `name` (its declaration: engine_registry), checked against the files it will run; one line
        for an engine that runs no files of this machine (the endpoint: servers someone else started)."""
        if engine_registry.of(name).remote:
            raise ConfigError(f"--engine {name} measures servers someone else started (--url, --baseline-url), not "
                              f"the pair {self.name}: sweep it alone, with no pair")
        return engine_registry.kind(name).engine_class().for_grid(grid, self.files)

    def does_not_fit(self, load: LoadConfig, n_ctx: int) -> str | None:
        return capacity.does_not_fit(self.files, load, n_ctx, self.budget) if self.budget is not None else None

    def side_by_side(self, loads: list[LoadConfig], n_ctx: int) -> bool:
        return capacity.side_by_side(self.files, loads, n_ctx, self.budget)


def as_measured(what: PairFiles | SweepSubject) -> SweepSubject:
    """A pair's files as the local pair they are; anything else as it is."""
    return LocalPair(what) if isinstance(what, PairFiles) else what
