"""Speed beside the memory plan (`plan --measure`): twins of the target and the draft (models/twin.py), written from
their headers into a temporary folder under the cache and deleted afterwards, then each placement the plan found to
fit measured through sweep.iter_records: the target alone at the row's -ngl and the draft alone at its -ngld, greedy,
one short built-in prompt, one repetition. A twin decodes as fast as its model, so these are the models' speeds on
this machine; its text and acceptance mean nothing, so no speculative run is kept.

A build that cannot offload runs every placement on the CPU: the placements are then one setting, measured once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

from gguf_bench import options
from gguf_bench.errors import ConfigError
from gguf_bench.measure.inputs import prompts
from gguf_bench.measure.plan import Cell, Grid, Setting, cells_for, measured
from gguf_bench.measure.sweep import SweepEvents, iter_records
from gguf_bench.models.pairs import PairFiles
from gguf_bench.models.twin import twin_folder, twin_pair
from gguf_bench.results.schema.naming import fresh_name
from gguf_bench.results.schema.parts.order import LOADS_ONCE  # calibrations: one load a setting
from gguf_bench.results.schema.records import PYTHON_ENGINE, Mode, RunRecord
from gguf_bench.results.schema.store import append_record, ensure_results_dir, exclusive

DEFAULT_N = 32  # tokens each run generates (--measure-n)
PROMPT_ID = "code-short"  # the built-in prompt every run starts from
SWEEP = "plan"  # the `sweep` field of the records

Placement = tuple[int, int]  # (-ngl, -ngld) as layer counts


@dataclass(frozen=True)
class SpeedRun:
    """How `plan --measure` measures: tokens per run, context, threads, and whether the build honours -ngl/-ngld."""

    n_predict: int = DEFAULT_N
    n_ctx: int = 4096
    threads: int | None = None  # None: runtimes/llama_cpp.Model's default, every core
    offload: bool = True

    def runs_at(self, placement: Placement) -> Placement:
        """Where a placement really runs: on a build that cannot offload, on the CPU whatever -ngl says."""
        return placement if self.offload else (0, 0)

    def caption(self) -> str:
        threads = self.threads or os.cpu_count() or 1
        where = "" if self.offload else "; this build cannot offload, so every row ran on the CPU (measured once)"
        return (f"target/draft t/s: decode tokens/s of twins (synthetic weights: speed only) measured on this machine, "
                f"each model alone, greedy, -n {self.n_predict}, -c {self.n_ctx}, {threads} threads, prompt "
                f"{PROMPT_ID}, 1 run{where}")


@dataclass(frozen=True)
class Speeds:
    """A placement's measured speeds (None where not measured), and why one is missing."""

    target: float | None = None
    draft: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class PlacementSpeeds:
    """What plan --measure measured: the speeds at each placement, the records they come from and their file."""

    speeds: dict[Placement, Speeds]  # by the plan's own placement
    records: list[RunRecord]
    out: Path


def results_file(name: str | None) -> Path:
    """The results file of `plan --measure`: always a new one (plan-TIMESTAMP, or --name), in a writable folder."""
    name = options.results_name(name or fresh_name(SWEEP))
    out = ensure_results_dir() / f"{name}.jsonl"
    if out.exists():
        raise ConfigError(f"{out} already exists and `plan --measure` stores its runs in a new file; choose another "
                          f"--name (or leave it out: {SWEEP}-TIMESTAMP)")
    return out


def measure_speeds(pair: tuple[str, str, str], registry: Path | None, placements: list[Placement], run: SpeedRun,
                   out: Path, events: SweepEvents = SweepEvents()) -> PlacementSpeeds:
    """Twins of the pair (its name, and its target's and draft's sources as models/headers.source_prefix reads them)
    in a temporary folder; each distinct setting the placements run at measured once, its records appended to `out`
    as they come; the folder (models/twin.twin_folder) is deleted on every way out."""
    with twin_folder("plan-twins-") as folder, exclusive(out):
        files = twin_pair(pair, Path(folder), registry)
        by_setting, records = {}, []
        for setting in dict.fromkeys(run.runs_at(p) for p in placements):
            got = list(_measure_setting(files, setting, run, events))
            for record in got:
                append_record(out, record)
            by_setting[setting] = speeds_of(got)
            records += got
    measured(records, "measuring the twins")  # every run failed (a load, memory): that is the one error
    return PlacementSpeeds({p: by_setting[run.runs_at(p)] for p in placements}, records, out)


def speed_grid(setting: Placement, run: SpeedRun) -> Grid:
    """One setting; the target alone and the draft alone (the grid's K=1 speculative cell is skipped)."""
    return Grid(loads=LOADS_ONCE, ks=[1], ngls=[setting[0]], nglds=[setting[1]], temperatures=[0.0],
                prompts=prompts.builtin([PROMPT_ID]),
                repetitions=1, n_predict=run.n_predict, n_ctx=run.n_ctx, threads=run.threads, with_draft_alone=True,
                engines=(PYTHON_ENGINE,))


def _measure_setting(files: PairFiles, setting: Placement, run: SpeedRun, events: SweepEvents):
    grid = speed_grid(setting, run)
    speculative = [c for c in cells_for(grid) if c.mode == Mode.SPECULATIVE]
    skip = {_key(files, grid, c) for c in speculative}
    # a context grown to fit (-c smaller than prompt + -n) changes the keys: the speculative run is then dropped here
    return (r for r in iter_records(SWEEP, files, grid, skip, events) if r.mode != Mode.SPECULATIVE)


def _key(files: PairFiles, grid: Grid, cell: Cell) -> str:
    return Setting(files, grid, grid.settings()[0], PYTHON_ENGINE, {}).key(cell)


def speeds_of(records: list[RunRecord]) -> Speeds:
    """Mean tokens/s of the target-alone and the draft-alone runs; the first error where one has none."""
    def speed(mode: Mode) -> float | None:
        got = [r.metrics.tokens_per_s for r in records if r.mode == mode and r.metrics and r.metrics.tokens_per_s]
        return mean(got) if got else None

    target, draft = speed(Mode.TARGET), speed(Mode.DRAFT)
    error = next((r.error for r in records if r.error), None)
    return Speeds(target, draft, error if target is None or draft is None else None)
