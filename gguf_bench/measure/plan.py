"""The plan of a sweep, apart from running it: the grid the user asked for (drafting strategy x draft length x -ngl x
-ngld x context settings x temperature x prompt x repetition x depth x concurrency), its validation, and its expansion
into settings (one load of a pair, or one llama-server configuration) x cells, each cell with the key --resume knows
it by.

Nothing here loads a model: engines (measure/engines/protocol.py) run what the plan lists.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from itertools import product
from pathlib import Path

from gguf_bench import axes, options
from gguf_bench import engine_registry as capabilities
from gguf_bench.decoding.loop import Verify
from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.decoding.strategy import DEFAULT_STRATEGY, Strategy
from gguf_bench.errors import BenchError, ConfigError
from gguf_bench.measure.inputs.prompts import Prompt
from gguf_bench.measure.pair import LoadConfig, PairFiles
from gguf_bench.measure.proof import marked
from gguf_bench.measure.trackers import TRACKERS
from gguf_bench.models.offload_plan import Budget
from gguf_bench.options import layers_label
from gguf_bench.placing import Placing
from gguf_bench.results.schema.parts.machine_load import Load
from gguf_bench.results.schema.parts.offload import Offload
from gguf_bench.results.schema.parts.order import LOADS_EACH, LOADS_ONCE
from gguf_bench.results.schema.parts.provenance import Build
from gguf_bench.results.schema.parts.server_process import Server as ServerRecord
from gguf_bench.results.schema.records import PYTHON_ENGINE, Mode, RunConfig, RunMetrics, RunRecord
from gguf_bench.results.schema.run_fields import bytes_per_token, decode_steps
from gguf_bench.results.schema.store import now_iso
from gguf_bench.runtimes.llama_server import NGRAM_CACHE_K

LOADS = (LOADS_EACH, LOADS_ONCE)  # --loads
# the grid's lists that make a load, each with the LoadConfig field it fills, in the product's order: declared once, so
# the product (Grid.settings) and the narrowing to one setting (Grid.narrowed: Ray's units) cannot drift apart
LOAD_AXES = (("ngls", "ngl"), ("nglds", "ngld"), ("placings", "placing"), ("placings_draft", "placing_draft"),
             *((a.grid, a.name) for a in axes.AXES),  # llama.cpp's context settings, each declared once (axes.py)
             ("server_bins", "server_bin"), ("libs", "lib"))
SKIPPED = "skipped: "  # the error of a cell not run because its setting cannot fit the device


@dataclass(frozen=True)
class Grid(axes.fields_of("GridAxes", lists=True, frozen=True)):
    """What the user asked to sweep; beside these fields, a list per declared axis (gguf_bench/axes.py: Axis.grid,
    [None] where not given: llama.cpp's default), swept like -ngl."""

    ks: list[int]
    ngls: list[int]
    nglds: list[int]
    temperatures: list[float]
    prompts: list[Prompt]
    repetitions: int = 1
    max_reps: int | None = None  # -r auto: repeat the undecided cells up to this many repetitions (measure/repeat.py)
    budget_s: float | None = None  # -r auto: no pass starts after this many seconds of the sweep
    margin: float | None = None  # -r auto: % within which two settings are the same, a closed verdict (summary.MARGIN)
    objective: str = "decode"  # what -r auto's verdicts read (summary.OBJECTIVES)
    n_predict: int = 64
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    n_ctx: int = 2048
    threads: int | None = None
    with_draft_alone: bool = True
    with_target_alone: bool = True  # False: no baseline cells (tune --check's cost-schedule runs reuse its own)
    vram: Budget | None = None  # device bytes to plan for (None: the first GPU device's own figure, on a GPU build)
    verify: Verify = Verify.BATCHED
    strategies: list[Strategy] = field(default_factory=lambda: [DEFAULT_STRATEGY])  # drafters.Strategy, swept like K
    engines: tuple[str, ...] = (PYTHON_ENGINE,)  # who generates: gguf-bench's loop, llama-server, or both
    # where the weights go beyond -ngl (placing.py: -ncmoe, -ot, -dev; the draft's -ncmoed, -otd, -devd), swept like -ngl
    placings: list[Placing] = field(default_factory=lambda: [Placing()])
    placings_draft: list[Placing] = field(default_factory=lambda: [Placing()])
    # llama.cpp builds (server engine: --server-bin A,B, each binary a setting; [None]: its one binary), from the options
    server_bins: list[Path | None] = field(default_factory=lambda: [None])
    libs: list[Path | None] = field(default_factory=lambda: [None])  # the Python loop's: --lib A,B (libllama's folders)
    # several users at once (server engine only): llama-server's slots (-np) and the clients that send together
    # (None: as many as slots); parallels None is one request at a time on one slot
    parallels: list[int] | None = None
    clients: list[int] | None = None
    depths: list[int] = field(default_factory=lambda: [0])  # tokens of filler before the prompt (measure/inputs/depth.py)
    # what the engines own beyond these axes (their options: measure/engines/declared.py), one instance per engine
    # that declares any; an engine left out reads its declared defaults (options_of)
    engine_options: tuple = ()
    trackers: tuple[str, ...] = TRACKERS  # what each cell is measured inside (measure/trackers/: load, memory, energy)
    # each load (a model load, a llama-server process) serves one repetition ('each': the unit the verdicts count is the
    # repetition, so a load's own speed is in every interval) or the whole sweep ('once': for models too large to load
    # again; the answer then rests on one load per setting, and says so)
    loads: str = LOADS_EACH
    invocation: str = field(default_factory=lambda: uuid.uuid4().hex[:12])  # this run of the command: a pair's two
    # runs come from one invocation (parts.order.Order.invocation)

    def __post_init__(self) -> None:
        for axis, values in (a for o in self.engine_options for a in o.load_axes().items()):  # --server-bin A,B
            if getattr(self, axis) == [None]:  # a grid narrowed to one value (Grid.narrowed) keeps it
                object.__setattr__(self, axis, values)
        for k in self.ks:
            options.draft_length(k)
        strategies = list(dict.fromkeys(s.canonical() for s in self.strategies))  # settings a strategy ignores don't multiply cells
        object.__setattr__(self, "strategies", strategies)
        for s in strategies:
            s.check(max(self.ks), has_draft_model=True)
        self._check_engines()
        self._check_concurrency()
        self._check_depths()
        options.repetitions(self.repetitions)
        if self.loads not in LOADS:
            raise ConfigError(f"--loads takes {' or '.join(LOADS)}, got '{self.loads}'")
        if self.max_reps is not None and self.max_reps < AUTO_FIRST:
            raise ConfigError(f"--max-reps must be >= {AUTO_FIRST} (the first pass of -r auto), got {self.max_reps}")
        options.n_predict(self.n_predict)
        for t in self.temperatures:
            SamplingConfig(temperature=t, top_k=self.top_k, top_p=self.top_p)  # validates
        if not self.settings():  # every combination is one llama.cpp refuses: say why (a sweep leaves such ones out)
            raise ConfigError(self.left_out()[0])
        if self.k_max + 1 > (n_batch := min(lo.n_batch for lo in self.settings())):
            raise ConfigError(f"a draft of {self.k_max} tokens is verified in one batch of {self.k_max + 1}, more than "
                              f"-b {n_batch}; raise -b/--batch-size or lower -K")

    def _check_engines(self) -> None:
        for engine in self.engines:
            for s in self.strategies:
                capabilities.of(engine).check_strategy(s)
            for a in axes.AXES:  # an axis swept where an engine does not act on it would measure one setting twice
                if getattr(self, a.grid) != [None] and engine not in a.engines:
                    acting = f", or choose --engine {' or '.join(a.engines)}" if a.engines else ""
                    raise ConfigError(f"{a.flag} is a setting {capabilities.of(engine).what} does not pass to llama.cpp: "
                                      f"leave it out{acting}")

    def _check_depths(self) -> None:
        for d in self.depths:
            if d < 0:
                raise ConfigError(f"-d/--depth takes token counts of 0 or more, got {d}")
        object.__setattr__(self, "depths", sorted(set(self.depths)))

    def _check_concurrency(self) -> None:
        if self.clients and not self.parallels:
            object.__setattr__(self, "parallels", [1])
        for n in (self.parallels or []) + (self.clients or []):
            if n < 1:
                raise ConfigError(f"--parallel and --clients take counts of 1 or more, got {n}")
        alone = [capabilities.of(e) for e in self.engines if not capabilities.of(e).concurrent]
        if self.parallels and alone:
            slots = capabilities.names_with("concurrent")
            raise ConfigError(f"{alone[0].what} generates one stream at a time: --parallel and --clients need "
                              f"--engine {' or '.join(slots)}")

    def options_of(self, engine: str):
        """The options `engine` owns (its EngineOptions), as given, else its declared defaults; None where it owns none."""
        mine = [o for o in self.engine_options if o.engine == engine]
        if mine:
            return mine[0]
        declared = capabilities.kind(engine).options_class()
        return declared() if declared else None

    @property
    def looks(self) -> int | None:
        """-r auto: how many times the sweep looks at its verdicts (repeat.looks); None for a fixed -r."""
        return None if self.max_reps is None else len(auto_looks(self.max_reps))

    @property
    def k_max(self) -> int:
        """The longest draft the loop can make: the most tokens a verify batch adds beyond one."""
        return max(s.max_k(k) for s in self.strategies for k in self.ks)

    @property
    def k_max_any_engine(self) -> int:
        """k_max, or llama-server's fixed ngram-cache draft where that is swept."""
        return max(NGRAM_CACHE_K if s.spec_type == "ngram-cache" else s.max_k(k) for s in self.strategies for k in self.ks)

    def concurrency(self) -> list[tuple[int | None, int | None]]:
        """(slots, clients) pairs to run: [(None, None)] for one request at a time (no --parallel)."""
        if not self.parallels:
            return [(None, None)]
        return [(n, c) for n in self.parallels for c in (self.clients or [n])]

    def _combinations(self) -> list[LoadConfig]:
        """Every load the grid's LOAD_AXES make, one product (the first axis slowest)."""
        lists = [getattr(self, axis) for axis, _ in LOAD_AXES]
        return [LoadConfig(n_ctx=self.n_ctx, threads=self.threads, seed=self.seed,
                           **{field_name: v for (_, field_name), v in zip(LOAD_AXES, values)})
                for values in product(*lists)]

    def narrowed(self, load: LoadConfig) -> Grid:
        """The grid of one setting: every LOAD_AXES list narrowed to `load`'s value (a Ray unit's grid)."""
        return replace(self, **{axis: [getattr(load, field_name)] for axis, field_name in LOAD_AXES})

    def settings(self) -> list[LoadConfig]:
        """Each setting a model pair is loaded with: -ngl x -ngld x the context settings, less the combinations llama.cpp
        cannot run (left_out says why)."""
        return [lo for lo in self._combinations() if lo.impossible() is None]

    def left_out(self) -> list[str]:
        """Why each combination that settings() leaves out cannot run, once per reason."""
        return list(dict.fromkeys(why for lo in self._combinations() if (why := lo.impossible())))


AUTO_FIRST = 2  # -r auto: repetitions of the first pass, the fewest that give an interval


def auto_looks(max_reps: int) -> list[int]:
    """The repetition counts at which an auto sweep looks at its verdicts: 2, 3, 5, 8, 12, ... up to max_reps (always
    one): each look adds about half the runs there were, so few looks cover a wide range."""
    out, n = [], AUTO_FIRST
    while n < max_reps:
        out.append(n)
        n = max(n + 1, math.ceil(n * 1.5))
    return out + [max_reps]


def single_run_grid(k: int, ngl: str, ngld: str, temperature: float, prompt: Prompt, **kw) -> Grid:
    """The grid of `gguf-bench run`: one setting, one K, one prompt (and one strategy: strategies=[...] in kw)."""
    return Grid(ks=[k], ngls=[options.layers(ngl)], nglds=[options.layers(ngld)], temperatures=[temperature],
                prompts=[prompt], **kw)


@dataclass(frozen=True)
class Cell:
    mode: Mode
    k: int
    temperature: float
    prompt: Prompt
    repetition: int
    strategy: Strategy = DEFAULT_STRATEGY
    engine: str = PYTHON_ENGINE
    parallel: int | None = None  # server slots of a concurrent round (None: one request at a time)
    clients: int | None = None
    depth: int = 0

    @property
    def baseline(self) -> tuple:
        """Which target-alone run a greedy speculative run of this cell is compared with (same engine, prompt, depth
        and concurrency)."""
        return self.engine, self.prompt.id, self.depth, self.parallel, self.clients

    def config(self, grid: Grid, load: LoadConfig) -> RunConfig:
        # the default strategy and verify mode are stored as None: a record names only what differs from them
        speculative = self.mode == Mode.SPECULATIVE
        # the axes are stored as llama.cpp ran them (defaults filled in); cell_fields leaves the defaults out
        return RunConfig(ngl=layers_label(load.ngl), ngld=layers_label(load.ngld), n_ctx=load.n_ctx, threads=load.threads,
                         seed=load.seed, k=self.k, temperature=self.temperature, top_k=grid.top_k, top_p=grid.top_p,
                         n_predict=grid.n_predict, prompt_id=self.prompt.id, chat=self.prompt.chat,
                         repetition=self.repetition,
                         strategy=self.strategy if speculative and self.strategy != DEFAULT_STRATEGY else None,
                         verify=str(grid.verify) if speculative and grid.verify != Verify.BATCHED else None,
                         category=self.prompt.category or None,
                         engine=capabilities.stored(self.engine),
                         **load.stored(),
                         parallel=self.parallel, clients=self.clients, depth=self.depth or None,
                         prompt_length=self.prompt.length,
                         placement=load.placing.label(), placement_draft=load.placing_draft.label(draft=True),
                         rpc_delay_ms=load.placing.rpc_delay_ms if load.placing.rpc else None,
                         server_bin=str(load.server_bin) if load.server_bin else None,
                         lib=str(load.lib) if load.lib else None)

    def sampling(self, grid: Grid) -> SamplingConfig:
        """Each repetition draws with its own seed (seed + repetition)."""
        return SamplingConfig(self.temperature, grid.top_k, grid.top_p, grid.seed + self.repetition)


def cells_for(grid: Grid, has_draft: bool = True, engine: str = PYTHON_ENGINE) -> list[Cell]:
    """Cells of one offload setting and engine, in run order: per concurrency, repetition, baseline then each strategy
    and K (the server engine has no draft-alone runs; ngram-cache drafts a fixed 8, so it runs at that K only)."""
    cells = []
    can = capabilities.of(engine)
    for (parallel, clients), depth in product(grid.concurrency() if can.concurrent else [(None, None)], grid.depths):
        where = {"engine": engine, "parallel": parallel, "clients": clients, "depth": depth}
        for temp in grid.temperatures:
            for prompt in grid.prompts:
                for rep in range(grid.repetitions):
                    if grid.with_target_alone:
                        cells.append(Cell(Mode.TARGET, 0, temp, prompt, rep, **where))
                    if grid.with_draft_alone and has_draft and can.draft_alone:
                        cells.append(Cell(Mode.DRAFT, 0, temp, prompt, rep, **where))
                    cells += [Cell(Mode.SPECULATIVE, k, temp, prompt, rep, s, **where)
                              for s in grid.strategies for k in _ks(grid, s)]
    return cells


def block_key(cell: Cell) -> tuple:
    """The repetition block a cell belongs to: its runs are measured together, and a verdict pairs a speculative run
    with the target alone of its own block (same concurrency, depth, temperature, prompt and repetition)."""
    return cell.parallel, cell.clients, cell.depth, cell.temperature, cell.prompt.id, cell.repetition


def _blocks(cells: list[Cell]) -> list[list[Cell]]:
    """The cells by block, in the grid's order, depth by depth (the filler is prefilled once per depth)."""
    blocks: dict[tuple, list[Cell]] = {}
    for cell in cells:
        blocks.setdefault(block_key(cell), []).append(cell)
    return sorted(blocks.values(), key=lambda block: block[0].depth)


def shuffled(cells: list[Cell], seed: int) -> list[Cell]:
    """The cells block by block, each block in a random order seeded by `seed` and the block's own key, so that no cell
    is always measured first (nor always right after another), whichever pass of -r auto or chunk of an interleaved
    sweep measures the block. No cell is forced first: the greedy text a speculative run is compared with is made
    untimed where it is missing (the engines' reference runs), never by putting the target alone first."""
    out = []
    for block in _blocks(cells):
        random.Random(f"{seed}:{block_key(block[0])}").shuffle(block)
        out += block
    return out


def counterbalanced(cells: list[Cell], group: Callable[[Cell], tuple]) -> list[Cell]:
    """Where what the cells need cannot be held at once (llama-server processes): one repetition at a time, and in it
    every group's cells together, the groups in the grid's order at even repetitions and reversed at odd ones
    (A B | B A | A B | B A), so that a steady drift cancels; per concurrency level. A repetition's own index decides its
    direction, so the order stays balanced for any -r and across -r auto's passes (one repetition each)."""
    out = []
    for level in _levels(cells).values():
        for rep in sorted({c.repetition for c in level}):
            groups: dict[tuple, list[Cell]] = {}
            for cell in sorted((c for c in level if c.repetition == rep), key=lambda c: c.mode != Mode.TARGET):
                groups.setdefault(group(cell), []).append(cell)
            out += [c for g in turned(list(groups.values()), rep) for c in sorted(g, key=lambda c: c.depth)]
    return out


def turned(items: list, repetition: int) -> list:
    """`items` in their order at an even repetition, reversed at an odd one: A B | B A | A B ..., each side's mean
    position the same over two repetitions, and the side a repetition ends with the one the next starts with."""
    return items if repetition % 2 == 0 else items[::-1]


def _levels(cells: list[Cell]) -> dict[tuple, list[Cell]]:
    levels: dict[tuple, list[Cell]] = {}
    for cell in cells:
        levels.setdefault((cell.parallel, cell.clients), []).append(cell)
    return levels


def _ks(grid: Grid, strategy: Strategy) -> list[int]:
    return [NGRAM_CACHE_K] if strategy.spec_type == "ngram-cache" else grid.ks


def cell_key(pair: str, files: PairFiles | None, config: RunConfig, mode: Mode, served: str | None = None) -> str:
    """A cell's identity (--resume): its pair, the files' names, its mode and its config; `files` None: servers someone
    else started, named by the model they serve (`served`, as the server's /v1/models names it)."""
    target, draft = (files.target.name, files.draft.name if files.draft else None) if files else (Path(served).name, None)
    ident = {"pair": pair, "target": target, "draft": draft, "mode": str(mode), **config.cell_fields()}
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:20]


def done(record: RunRecord) -> bool:
    """Whether --resume leaves the cell alone: it was measured, or skipped because it cannot fit the device. A cell
    that failed (a load failure, a server that died) runs again."""
    return record.error is None or record.error.startswith(SKIPPED)


def cells_done(records: list, pair: str | None = None) -> set[str]:
    """Keys of the cells these records hold done (of `pair` only, when given)."""
    return {r.cell for r in records
            if isinstance(r, RunRecord) and r.cell and done(r) and (pair is None or r.pair == pair)}


def cells_failed(records: list) -> set[str]:
    """Keys of the cells whose every record failed (none measured or skipped): what `sweep --resume` runs again."""
    failed = {r.cell for r in records if isinstance(r, RunRecord) and r.cell and not done(r)}
    return failed - cells_done(records)


# a record's config fields a load fills (its offload, context, threads, placement, build): empty where nothing is loaded
UNLOADED = tuple(({f.name for f in fields(LoadConfig)} & {f.name for f in fields(RunConfig)} - {"seed"})
                 | {"placement", "placement_draft", "rpc_delay_ms"})


@dataclass(frozen=True)
class ServedModel:
    """What names the cells of servers someone else started, where no files do: the sweep's pair name and the model
    they serve (its /v1/models id)."""

    name: str
    model: str


@dataclass(frozen=True)
class Setting:
    """What one load of a pair, or one llama-server configuration, needs: the files, the load (offload, context,
    threads), the grid's run options, the engine, and what every record of the sweep carries (`static`). Servers
    someone else started (the endpoint) have neither files nor a load of gguf-bench's: `files` and `load` None, the
    cells named by what they serve (`served`)."""

    files: PairFiles | None
    grid: Grid
    load: LoadConfig | None
    engine: str
    static: dict
    served: ServedModel | None = None  # where files is None: what names the cells

    def config(self, cell: Cell) -> RunConfig:
        """The cell's stored config; where nothing is loaded (load None) the load's fields are empty, not guessed."""
        if self.load is None:
            return replace(cell.config(self.grid, LoadConfig(seed=self.grid.seed)), **dict.fromkeys(UNLOADED))
        return cell.config(self.grid, self.load)

    def key(self, cell: Cell) -> str:
        if self.files is None:
            return cell_key(self.served.name, None, self.config(cell), cell.mode, self.served.model)
        return cell_key(self.files.name, self.files, self.config(cell), cell.mode)

    def record(self, cell: Cell, metrics: RunMetrics | None = None, offload: Offload | None = None,
               error: str | None = None, load: Load | None = None, server: ServerRecord | None = None,
               build: Build | None = None) -> RunRecord:
        """The cell's record: what it measured, or why it could not; a speculative run that drafted nothing is marked
        (proof.marked); the bytes its decode read a token, from the headers of the files it ran (the ceiling's
        numerator, stored so that a report elsewhere, a Ray driver's too, has it without the files)."""
        metrics = marked(metrics, cell.mode, cell.strategy, cell.k, self.engine, self.files.target if self.files else None)
        record = RunRecord(cell=self.key(cell), time=now_iso(), **self.static, mode=cell.mode,
                           config=self.config(cell), metrics=metrics, offload=offload, error=error,
                           load=load, server=server, build=build)
        if metrics is not None:
            metrics.bytes_per_token = bytes_per_token(record, decode_steps(record))
        return record


@dataclass(frozen=True)
class Unit:
    """One setting and the cells to measure under it, in the grid's order (the engine may reorder them)."""

    setting: Setting
    cells: list[Cell]


def interleaved(units: list[Unit], by_block: bool = False) -> list[Unit]:
    """Several settings measured in turn, one repetition at a time: each setting's cells of a repetition as one unit,
    the settings in the plan's order at even repetitions and reversed at odd ones (A B | B A | A B, `turned`), so that
    the runs a verdict compares across settings (offload, placement, context, threads, engine) are measured next to
    each other and a steady drift cancels. The repetition's index decides the direction, so -r auto's passes and a
    --resume go on balanced; the setting a repetition ends with starts the next (no reload at the turn). One setting:
    `units` unchanged. by_block: the settings are held side by side, so they take turns at every block
    (_interleaved_blocks)."""
    if len(units) < 2:
        return units
    if by_block:
        return _interleaved_blocks(units)
    out = []
    for rep in sorted({c.repetition for u in units for c in u.cells}):
        here = [Unit(u.setting, [c for c in u.cells if c.repetition == rep]) for u in units]
        out += turned([u for u in here if u.cells], rep)
    return out


def per_repetition(units: list[Unit]) -> list[Unit]:
    """The units cut where their repetition changes (one setting's unit holds every repetition), in order: a chunk of
    one repetition each, so that --loads each loads a setting again between them."""
    out = []
    for unit in units:
        reps = list(dict.fromkeys(c.repetition for c in unit.cells))
        out += [Unit(unit.setting, [c for c in unit.cells if c.repetition == r]) for r in reps] if len(reps) > 1 else [unit]
    return out


def _interleaved_blocks(units: list[Unit]) -> list[Unit]:
    """Settings loaded side by side take turns block by block (one prompt of one repetition), A B | B A | A B ...: the
    runs a cross-setting pair compares are seconds apart, and no two pairs share their order (a one-repetition turn
    gives every prompt of a repetition the same order, so its pairs share an order effect and are not independent).
    Each block's index within its repetition and the repetition's own index decide the direction, so -r auto's passes
    stay balanced."""
    keys = sorted(dict.fromkeys(block_key(c) for u in units for c in u.cells), key=lambda k: (k[-1], k[2]))  # stable
    within: dict[tuple, int] = {}
    out = []
    for key in keys:
        index = within[key[-1]] = within.get(key[-1], -1) + 1
        here = [Unit(u.setting, [c for c in u.cells if block_key(c) == key]) for u in units]
        out += turned([u for u in here if u.cells], key[-1] + index)
    return out


@dataclass(frozen=True)
class Plan:
    units: list[Unit]
    total: int  # cells of the grid
    todo: int  # cells to measure now (the rest are done in the results file)
    again: int = 0  # of those, cells done in the file and measured again: the baselines of new cells (with_baselines)


def expand(files: PairFiles, grid: Grid, static: dict, skip: set[str] = frozenset(),
           only: Callable[[Setting, Cell], bool] | None = None) -> Plan:
    """The grid as settings x cells, leaving out the cells whose keys are in `skip` (and, with `only`, the cells it
    does not select); settings with nothing to run are left out."""
    units, total, again = [], 0, 0
    for each in grid.settings():
        for engine in grid.engines:
            if (load := each.run_by(capabilities.of(engine).server_process, grid.server_bins[0], grid.libs[0])) is None:
                continue
            setting = Setting(files, grid, load, engine, static)
            cells = cells_for(grid, files.draft is not None, engine)
            total += len(cells)
            done = {id(c) for c in cells if setting.key(c) in skip}
            todo = with_baselines(cells, [c for c in cells if id(c) not in done and (only is None or only(setting, c))])
            again += sum(id(c) in done for c in todo)
            if todo:
                units.append(Unit(setting, todo))
    return Plan(units, total, sum(len(u.cells) for u in units), again)


def with_baselines(cells: list[Cell], todo: list[Cell]) -> list[Cell]:
    """The cells to measure with the target alone of each block that measures anything else, even where an earlier
    invocation stored it (a --resume adding a K, a re-run of failed cells): a pair lives in one invocation, so the
    baseline is measured again beside the new runs (summary.sweep_of). In the grid's order."""
    blocks = {block_key(c) for c in todo if c.mode != Mode.TARGET}
    chosen = {id(c) for c in todo}
    return [c for c in cells if id(c) in chosen or (c.mode == Mode.TARGET and block_key(c) in blocks)]


def measured(records: list[RunRecord], what: str | None = None) -> list[RunRecord]:
    """`records`, unless every one of them failed: then the first error is the error (`what` says who failed)."""
    failed = [r for r in records if r.error]
    if records and len(failed) == len(records):
        raise BenchError(f"{what}: {failed[0].error}" if what else str(failed[0].error))
    return records
