"""A sweep: what is measured (measure/measured.py: a local pair, or served URLs) -> plan (measure/plan.py) -> engine
(measure/engines/protocol.py) -> store, the one loop of every engine. Several settings take turns one repetition at a time
(plan.interleaved), loaded side by side where they fit, else loaded again at each switch; one setting is loaded once
(-r auto's passes too: Measuring); each record is appended as soon as its cell is measured, so an interrupted sweep
continues with --resume.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path

from gguf_bench import engine_registry as capabilities
from gguf_bench.measure.engines.protocol import Engine, Session, measure_unit
from gguf_bench.measure.measured import SweepSubject, as_measured
from gguf_bench.measure.pair import LoadConfig, PairFiles
from gguf_bench.measure.plan import SKIPPED, Grid, Setting, Unit, auto_looks, cells_done, interleaved, per_repetition
from gguf_bench.measure.repeat import selects, undecided
from gguf_bench.measure.trackers import notes
from gguf_bench.results.schema.naming import check_new
from gguf_bench.results.schema.parts.order import LOADS_EACH, SETTINGS_ALTERNATE, SETTINGS_CHUNKS
from gguf_bench.results.schema.records import RunRecord
from gguf_bench.results.schema.store import append_record, exclusive, read_records


@dataclass
class SweepEvents:
    """Callbacks the CLI uses to show progress (the sweep itself prints nothing)."""

    # cells to run, cells of the grid already in the file, cells the file holds (of this grid or another one)
    start: Callable[[int, int, int], None] = lambda total, skipped, stored: None
    cell: Callable[[RunRecord], None] = lambda record: None
    loading: Callable[[LoadConfig], None] = lambda load: None
    note: Callable[[str], None] = lambda line: None  # something the user should know (a context grown to fit)
    stopped: Callable[[str], None] = lambda line: None  # -r auto: why it stopped repeating (the sweep's last line)


def run_sweep(name: str, what: PairFiles | SweepSubject | Runs, grid: Grid, out: Path, resume: bool,
              events: SweepEvents = SweepEvents()) -> Path:
    """Run every cell of `what` (a pair's files, or what an engine resolved from the command, measured here; or units
    that run elsewhere: distributed.OnRay) not already in `out`; append each record as soon as it is measured; with -r
    auto, then the cells of verdicts still open, look by look. The one writer of every sweep: the whole sweep holds
    `out`'s writer lock, so a second process on the same name fails at once (BusyError) instead of writing beside it."""
    events = _once(events)  # -r auto's passes: each note once
    runs = what if isinstance(what, Runs) else Here(name, as_measured(what), grid, out)
    with exclusive(out):
        check_new(out, resume)
        stored = read_records(out) if out.is_file() else []
        for record in runs.records(stored, events):  # each resumes only once its record is stored
            append_record(out, record)
            events.cell(record)
    return out


class Runs:
    """Where a sweep's units run, and the records they give, in the order to store them (run_sweep stores each before
    asking for the next): here (Here), or as Ray tasks on a cluster (distributed.OnRay)."""

    def records(self, stored: list, events: SweepEvents) -> Iterator[RunRecord]:
        raise NotImplementedError


class Here(Runs):
    """The units in this process: every setting's, taking turns (Measuring), then -r auto's looks."""

    def __init__(self, name: str, measured: SweepSubject, grid: Grid, out: Path):
        self.name, self.measured, self.grid, self.out = name, measured, grid, out

    def records(self, stored: list, events: SweepEvents) -> Iterator[RunRecord]:
        self.measured.check_stored(stored, self.out)
        with closing(Measuring(self.name, self.measured, self.grid, events)) as measuring:
            ran = 0
            for record in measuring.records(events, cells_done(stored, self.measured.name)):
                yield record
                ran += 1
            if self.grid.max_reps is not None:
                yield from until_decided(measuring.grid, self.measured.name, self.out, events, ran, measuring.records)


def _once(events: SweepEvents) -> SweepEvents:
    """The events with each note said once."""
    said: set[str] = set()

    def note(line: str) -> None:
        if line not in said:
            said.add(line)
            events.note(line)
    return replace(events, note=note)


Pass = Callable[[SweepEvents, set[str], Callable, int], Iterator[RunRecord]]  # (events, done, only, repetitions)


def until_decided(grid: Grid, pair: str, out: Path, events: SweepEvents, ran: int,
                  measure: Pass) -> Iterator[RunRecord]:
    """-r auto after its first pass: one look per plan.auto_looks count, each repeating through `measure` only the cells
    of verdicts still open (measure/repeat.py), their records for run_sweep to store (each look reads `out`); then why
    it stopped (events.stopped). ran: the cells measured so far (the progress bar counts on)."""
    why = yield from _looks(grid, pair, out, events, ran, measure)
    events.stopped(why)


def _looks(grid: Grid, pair: str, out: Path, events: SweepEvents, ran: int, measure: Pass) -> Generator:
    """until_decided's looks; returns why they stopped."""
    start, counts = time.monotonic(), auto_looks(grid.max_reps)
    for done_reps, next_reps in zip(counts, counts[1:]):
        open_ = undecided([r for r in read_records(out) if isinstance(r, RunRecord) and r.pair == pair], grid.margin,
                          grid.objective)
        if not open_.rows:
            return f"-r auto: the verdicts the deploy lines rest on are decided after {done_reps} repetitions"
        if grid.budget_s is not None and time.monotonic() - start > grid.budget_s:
            return (f"-r auto: the time budget ({grid.budget_s:g} s) is spent after {done_reps} repetitions; still "
                    f"open: {'; '.join(open_.why)}")
        events.note(f"-r auto: {done_reps} repetitions leave open {'; '.join(open_.why)}: repeating those cells to "
                    f"{next_reps}")
        done = cells_done(read_records(out), pair)
        def only(setting, cell, rows=open_.rows, before=done_reps):
            return cell.repetition >= before and selects(rows, setting, cell)
        quiet = replace(events, start=lambda todo, skipped, stored, before=ran: events.start(before + todo, 0, 0))
        for record in measure(quiet, done, only, next_reps):
            yield record
            ran += 1
    open_ = undecided([r for r in read_records(out) if isinstance(r, RunRecord) and r.pair == pair], grid.margin,
                      grid.objective)
    if not open_.rows:
        return f"-r auto: the verdicts the deploy lines rest on are decided after {counts[-1]} repetitions"
    return f"-r auto: --max-reps {grid.max_reps} reached; still open: {'; '.join(open_.why)}"


def iter_records(name: str, what: PairFiles | SweepSubject, grid: Grid, skip: set[str] = frozenset(),
                 events: SweepEvents = SweepEvents()) -> Iterator[RunRecord]:
    """Measure each cell whose key is not in `skip`, loading each setting once."""
    with closing(Measuring(name, what, grid, events)) as measuring:
        yield from measuring.records(events, skip)


class Measuring:
    """One sweep's checks, prompts and context, made once before anything loads, and its passes over the grid (-r auto
    makes one per look). Several settings take turns one repetition at a time: side by side, each loaded once, where the
    planner's figures hold them all; else one at a time, the last one open staying open from a repetition (and a pass)
    to the next, which starts with it (A B | B A), so -r auto repeating one setting's cells loads it once in all."""

    def __init__(self, name: str, what: PairFiles | SweepSubject, grid: Grid, events: SweepEvents):
        self.measured = as_measured(what)
        self.grid, self.prompts = self.measured.prepare(grid, events.note)  # every check before anything loads
        self.static = self.measured.static(name)
        self.engines: dict[str, Engine] = {}
        self.open: dict[tuple, tuple[Setting, Session]] = {}  # (engine, load) -> the setting and its session, loaded
        self.said: set[str] = set()  # a tracker's line (energy not measured, and why): once, not once per cell
        self.served: dict[tuple, int] = {}  # (engine, load) -> the repetition its open load serves (--loads each)

    @property
    def loaded(self) -> tuple[Setting, Session] | None:
        """The setting loaded last, and its session (None: nothing loaded)."""
        return next(reversed(self.open.values()), None)

    def records(self, events: SweepEvents, skip: set[str] = frozenset(), only=None,
                repetitions: int | None = None) -> Iterator[RunRecord]:
        """One pass: each cell whose key is not in `skip` (and that `only` selects, where given), up to `repetitions`
        (the grid's, where None). Several settings take turns one repetition at a time (plan.interleaved): loaded side
        by side where the planner's figures hold them all ('settings-alternate'), else one at a time, loaded again at
        each switch ('settings-chunks')."""
        grid = self.grid if repetitions is None else replace(self.grid, repetitions=repetitions)
        plan = self.measured.plan(grid, self.static, skip, only)
        for engine in dict.fromkeys(u.setting.engine for u in plan.units):  # each checked before anything loads
            if engine not in self.engines:
                self.engines[engine] = self.measured.engine(engine, self.grid)
        events.start(plan.todo, plan.total - plan.todo + plan.again, len(skip))
        if plan.again:
            events.note(f"{plan.again} target-alone cells already done are measured again beside the new cells: a pair "
                        "lives in one invocation")
        units = []
        for unit in plan.units:  # in the plan's order: interleaved turns it so that the setting open now goes first
            setting = unit.setting
            if why := self.measured.does_not_fit(setting.load, grid.n_ctx):
                for cell in unit.cells:  # kept in the results, with the reason, instead of a crash mid-sweep
                    yield setting.record(cell, error=f"{SKIPPED}{why}")
                continue
            units.append(unit)
        design = self._design(units)
        if design == SETTINGS_ALTERNATE:  # the loads of an earlier pass that this one does not measure close first
            for key in [k for k in self.open if k not in {_key(u.setting) for u in units}]:
                self.open.pop(key)[1].close()
        positions: dict[tuple, int] = {}  # each setting's next position in its own order
        for chunk in per_repetition(interleaved(units, by_block=design == SETTINGS_ALTERNATE)):
            key = _key(chunk.setting)
            if grid.loads == LOADS_EACH:
                self._fresh(chunk)
            session = self._session(chunk.setting, events, hold=design == SETTINGS_ALTERNATE)
            for record in measure_unit(session, chunk, design, positions.get(key, 0)):
                positions[key] = positions.get(key, 0) + 1
                for line in notes(record, self.said):
                    events.note(line)
                yield record

    def _design(self, units: list[Unit]) -> str | None:
        """How this pass's settings take turns (parts.order.Order.settings): None for one setting; side by side where each
        is gguf-bench's own loop (no server processes) and the planner's figures hold every load at once."""
        if len(units) < 2:
            return None
        in_process = all(not capabilities.of(u.setting.engine).server_process for u in units)
        loads = [u.setting.load for u in units]
        if in_process and self.measured.side_by_side(loads, self.grid.n_ctx):
            return SETTINGS_ALTERNATE
        return SETTINGS_CHUNKS

    def _session(self, setting: Setting, events: SweepEvents, hold: bool = False) -> Session:
        """The setting's session: the open one, if it is open; else it loads, the others closing first unless `hold`
        (side by side)."""
        if (key := _key(setting)) in self.open:
            return self.open[key][1]
        if not hold:
            self.close()
        if setting.load is not None:  # servers someone else started load nothing of ours
            events.loading(setting.load)
        self.open[key] = (setting, self.engines[setting.engine].open(setting, self.prompts))
        return self.open[key][1]

    def _fresh(self, chunk: Unit) -> None:
        """--loads each: the chunk's setting loaded again where its open load served another repetition (a fresh model
        load, fresh llama-server processes), so each repetition meets a load of its own."""
        key, repetition = _key(chunk.setting), chunk.cells[0].repetition
        if key in self.open and self.served.get(key) != repetition:
            self.open.pop(key)[1].close()
        self.served[key] = repetition

    def close(self) -> None:
        while self.open:
            self.open.pop(next(iter(self.open)))[1].close()


def _key(setting: Setting) -> tuple:
    return setting.engine, setting.load
