"""Expand a grid (drafting strategy x draft length x -ngl x -ngld x temperature x prompt x repetition) into cells,
run them with each offload setting loaded once, and append one record per cell as it finishes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from itertools import product
from pathlib import Path

from gguf_bench import options
from gguf_bench.decoding.divergence import Identity, compare_greedy
from gguf_bench.decoding.loop import Verify
from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.decoding.strategy import DEFAULT_STRATEGY, Strategy
from gguf_bench.engines.llama_cpp import Vocabulary, gpu_devices, read_info
from gguf_bench.engines.llama_server import NGRAM_CACHE_K
from gguf_bench.errors import BenchError, ConfigError
from gguf_bench.measure import server
from gguf_bench.measure.depth import after_filler
from gguf_bench.measure.loadmeter import LoadMeter
from gguf_bench.measure.pair import LoadConfig, LoadedPair, PairFiles, check_compatible
from gguf_bench.measure.prompts import Prompt
from gguf_bench.measure.server import ServerEngine
from gguf_bench.models.gguf import tensor_table
from gguf_bench.models.memory import Shape, fits
from gguf_bench.options import layers_label
from gguf_bench.results.records import (
    ENGINES,
    PYTHON_ENGINE,
    SERVER_ENGINE,
    Mode,
    Offload,
    RunConfig,
    RunMetrics,
    RunRecord,
)
from gguf_bench.results.store import (
    append_record,
    default_name,
    ensure_results_dir,
    environment,
    exclusive,
    models_record,
    now_iso,
    read_records,
)

SKIPPED = "skipped: "  # the error of a cell not run because its setting cannot fit the device


@dataclass(frozen=True)
class Grid:
    ks: list[int]
    ngls: list[int]
    nglds: list[int]
    temperatures: list[float]
    prompts: list[Prompt]
    repetitions: int = 1
    n_predict: int = 64
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    n_ctx: int = 2048
    threads: int | None = None
    with_draft_alone: bool = True
    with_target_alone: bool = True  # False: no baseline cells (tune --check's cost-schedule runs reuse its own)
    vram: int | None = None  # device bytes to plan for (None: the first GPU device's own figure, on a GPU build)
    verify: Verify = Verify.BATCHED
    strategies: list[Strategy] = field(default_factory=lambda: [DEFAULT_STRATEGY])  # drafters.Strategy, swept like K
    engines: tuple[str, ...] = (PYTHON_ENGINE,)  # who generates: gguf-bench's loop, llama-server, or both
    server_bin: Path | None = None  # the llama-server to run (None: engines/server_build.find_server's choice)
    # llama.cpp's context settings, swept like -ngl (None: its default, options.CONTEXT_DEFAULTS; -td: --threads)
    flash_attns: list[str | None] = field(default_factory=lambda: [None])
    cache_types_k: list[str | None] = field(default_factory=lambda: [None])
    cache_types_v: list[str | None] = field(default_factory=lambda: [None])
    batch_sizes: list[int | None] = field(default_factory=lambda: [None])
    ubatch_sizes: list[int | None] = field(default_factory=lambda: [None])
    threads_drafts: list[int | None] = field(default_factory=lambda: [None])
    # several users at once (server engine only): llama-server's slots (-np) and the clients that send together
    # (None: as many as slots); parallels None is one request at a time on one slot
    parallels: list[int] | None = None
    clients: list[int] | None = None
    request_timeout_s: float = 600.0  # the longest one request of a concurrent round may take
    depths: list[int] = field(default_factory=lambda: [0])  # tokens of filler before the prompt (measure/depth.py)
    warm_pool: bool = False  # n-gram types whose state outlives a request: one process per group, not per prompt

    def __post_init__(self) -> None:
        for k in self.ks:
            options.draft_length(k)
        strategies = list(dict.fromkeys(s.canonical() for s in self.strategies))  # settings a strategy ignores don't multiply cells
        object.__setattr__(self, "strategies", strategies)
        for s in strategies:
            s.check(max(self.ks), has_draft_model=True)
        for engine in self.engines:
            if engine not in ENGINES:
                raise ConfigError(f"unknown --engine '{engine}'; choose from {', '.join(ENGINES)} or both")
        if SERVER_ENGINE in self.engines:
            for s in strategies:
                server.check_strategy(s)
        if PYTHON_ENGINE in self.engines:
            for s in strategies:
                if s.server_only:
                    raise ConfigError(f"--spec-type {s.spec_type} is llama-server's own: run it with --engine server")
        self._check_concurrency()
        self._check_depths()
        options.repetitions(self.repetitions)
        options.n_predict(self.n_predict)
        for t in self.temperatures:
            SamplingConfig(temperature=t, top_k=self.top_k, top_p=self.top_p)  # validates
        if not self.settings():  # every combination is one llama.cpp refuses: say why (a sweep leaves such ones out)
            raise ConfigError(self.left_out()[0])
        k_max = max(s.max_k(k) for s in strategies for k in self.ks)
        if k_max + 1 > (n_batch := min(lo.n_batch for lo in self.settings())):
            raise ConfigError(f"a draft of {k_max} tokens is verified in one batch of {k_max + 1}, more than -b {n_batch}; "
                              "raise -b/--batch-size or lower -K")

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
        if self.parallels and PYTHON_ENGINE in self.engines:
            raise ConfigError("the Python engine generates one stream at a time: --parallel and --clients need "
                              "--engine server")
        if self.request_timeout_s <= 0:
            raise ConfigError(f"--request-timeout must be above 0 seconds, got {self.request_timeout_s:g}")

    def concurrency(self) -> list[tuple[int | None, int | None]]:
        """(slots, clients) pairs to run: [(None, None)] for one request at a time (no --parallel)."""
        if not self.parallels:
            return [(None, None)]
        return [(n, c) for n in self.parallels for c in (self.clients or [n])]

    def _combinations(self) -> list[LoadConfig]:
        return [LoadConfig(ngl, ngld, self.n_ctx, self.threads, self.seed, fa, ctk, ctv, b, ub, td)
                for ngl in self.ngls for ngld in self.nglds for fa in self.flash_attns for ctk in self.cache_types_k
                for ctv in self.cache_types_v for b in self.batch_sizes for ub in self.ubatch_sizes
                for td in self.threads_drafts]

    def settings(self) -> list[LoadConfig]:
        """Each setting a model pair is loaded with: -ngl x -ngld x the context settings, less the combinations llama.cpp
        cannot run (left_out says why)."""
        return [lo for lo in self._combinations() if lo.impossible() is None]

    def left_out(self) -> list[str]:
        """Why each combination that settings() leaves out cannot run, once per reason."""
        return list(dict.fromkeys(why for lo in self._combinations() if (why := lo.impossible())))


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

    def config(self, grid: Grid, load: LoadConfig) -> RunConfig:
        # the default strategy and verify mode are left out (None), so that cells (and --resume keys) of sweeps
        # made before those existed stay the same
        speculative = self.mode == Mode.SPECULATIVE
        # the context settings are stored as llama.cpp ran them (defaults filled in); cell_fields leaves the defaults out
        context = load.context
        return RunConfig(ngl=layers_label(load.ngl), ngld=layers_label(load.ngld), n_ctx=load.n_ctx, threads=load.threads,
                         seed=load.seed, k=self.k, temperature=self.temperature, top_k=grid.top_k, top_p=grid.top_p,
                         n_predict=grid.n_predict, prompt_id=self.prompt.id, chat=self.prompt.chat,
                         repetition=self.repetition,
                         strategy=self.strategy if speculative and self.strategy != DEFAULT_STRATEGY else None,
                         verify=str(grid.verify) if speculative and grid.verify != Verify.BATCHED else None,
                         category=self.prompt.category or None,
                         engine=self.engine if self.engine != PYTHON_ENGINE else None,
                         flash_attn=context["flash_attn"], cache_type_k=context["type_k"], cache_type_v=context["type_v"],
                         batch_size=load.n_batch, ubatch_size=load.n_ubatch, threads_draft=load.draft_threads,
                         parallel=self.parallel, clients=self.clients, depth=self.depth or None)


def cells_for(grid: Grid, has_draft: bool = True, engine: str = PYTHON_ENGINE) -> list[Cell]:
    """Cells of one offload setting and engine, in run order: per concurrency, repetition, baseline then each strategy
    and K (the server engine has no draft-alone runs; ngram-cache drafts a fixed 8, so it runs at that K only)."""
    cells = []
    for (parallel, clients), depth in product(grid.concurrency() if engine == SERVER_ENGINE else [(None, None)], grid.depths):
        where = {"engine": engine, "parallel": parallel, "clients": clients, "depth": depth}
        for temp in grid.temperatures:
            for prompt in grid.prompts:
                for rep in range(grid.repetitions):
                    if grid.with_target_alone:
                        cells.append(Cell(Mode.TARGET, 0, temp, prompt, rep, **where))
                    if grid.with_draft_alone and has_draft and engine == PYTHON_ENGINE:
                        cells.append(Cell(Mode.DRAFT, 0, temp, prompt, rep, **where))
                    cells += [Cell(Mode.SPECULATIVE, k, temp, prompt, rep, s, **where)
                              for s in grid.strategies for k in _ks(grid, s)]
    return cells


def _ks(grid: Grid, strategy: Strategy) -> list[int]:
    return [NGRAM_CACHE_K] if strategy.spec_type == "ngram-cache" else grid.ks


def results_path(name: str | None, resume: bool) -> tuple[str, Path]:
    """The sweep's name (from the time when not given) and its results file, in a folder proven writable."""
    if resume and not name:
        raise ConfigError("--resume needs --name NAME of the sweep to continue")
    name = options.results_name(name or _fresh_name("sweep"))
    out = ensure_results_dir() / f"{name}.jsonl"
    if out.exists() and not resume:
        raise ConfigError(f"{out} already exists; pass --resume to continue it, or choose another --name")
    return name, out


def run_path(name: str | None) -> Path:
    """`run`'s results file, in a folder proven writable: always a new file. A run never adds to a file that exists
    (a sweep's would pool the run's records with its own in `report`)."""
    name = options.results_name(name or _fresh_name("run"))
    out = ensure_results_dir() / f"{name}.jsonl"
    if out.exists():
        raise ConfigError(f"{out} already exists and `run` stores its records in a new file; choose another --name "
                          "(or leave it out: run-TIMESTAMP)")
    return out


def _fresh_name(prefix: str) -> str:
    """'run-20261122T023941', or with -2, -3, ... when a file of that name exists (two runs in one second)."""
    base = default_name(prefix)
    folder = ensure_results_dir()
    return next(n for n in (base, *(f"{base}-{i}" for i in range(2, 1000))) if not (folder / f"{n}.jsonl").exists())


def cell_key(pair: str, files: PairFiles, config: RunConfig, mode: Mode) -> str:
    ident = {"pair": pair, "target": files.target.name, "draft": files.draft.name if files.draft else None,
             "mode": str(mode), **config.cell_fields()}
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:20]


def cells_done(records: list) -> set[str]:
    """Keys of the cells these records hold done (measured, or skipped as unable to fit: see _done)."""
    return {r.cell for r in records if isinstance(r, RunRecord) and r.cell and _done(r)}


@dataclass
class SweepEvents:
    """Callbacks the CLI uses to show progress (the sweep itself prints nothing)."""

    # cells to run, cells of the grid already in the file, cells the file holds (of this grid or another one)
    start: Callable[[int, int, int], None] = lambda total, skipped, stored: None
    cell: Callable[[RunRecord], None] = lambda record: None
    loading: Callable[[LoadConfig], None] = lambda load: None
    note: Callable[[str], None] = lambda line: None  # something the user should know (a context grown to fit)


def run_sweep(name: str, files: PairFiles, grid: Grid, out: Path, resume: bool,
              events: SweepEvents = SweepEvents()) -> Path:
    """Run every cell not already in `out`; append each record as soon as it is measured. The whole sweep holds
    `out`'s writer lock: a second process on the same name fails at once (BusyError) instead of writing beside it."""
    with exclusive(out):
        if out.exists() and not resume:
            raise BenchError(f"{out} already exists; pass --resume to continue it, or choose another --name")
        stored = read_records(out) if out.is_file() else []
        mine = {r.cell for r in stored if isinstance(r, RunRecord) and r.cell and r.pair == files.name and _done(r)}
        for record in iter_records(name, files, grid, mine, events):
            append_record(out, record)
            events.cell(record)
    return out


def _done(record: RunRecord) -> bool:
    """Whether --resume leaves the cell alone: it was measured, or skipped because it cannot fit the device. A cell
    that failed (a load failure, a server that died) runs again."""
    return record.error is None or record.error.startswith(SKIPPED)


def iter_records(name: str, files: PairFiles, grid: Grid, skip: set[str] = frozenset(),
                 events: SweepEvents = SweepEvents()) -> Iterator[RunRecord]:
    """Measure each cell whose key is not in `skip`, loading each offload setting once."""
    if files.draft is not None:
        check_compatible(files)
    for s in grid.strategies:  # a target alone (no --draft) drafts by n-gram only
        s.check(max(grid.ks), has_draft_model=files.draft is not None)
    grid = sized_context(files, grid, events)
    _check_memory(files, grid)
    plan = [(load, cell) for load in grid.settings() for engine in grid.engines
            for cell in cells_for(grid, files.draft is not None, engine)]
    todo = [(load, cell) for load, cell in plan
            if cell_key(files.name, files, cell.config(grid, load), cell.mode) not in skip]
    events.start(len(todo), len(plan) - len(todo), len(skip))
    static = {"sweep": name, "pair": files.name, "env": environment(), "models": models_record(files.target, files.draft)}
    budget = _device_budget(grid)
    server_engine = ServerEngine(grid.server_bin) if SERVER_ENGINE in grid.engines and todo else None
    if server_engine is not None:
        server.check_files(grid.strategies, files, server_engine.help)
    for load in grid.settings():
        for engine in grid.engines:
            cells = [c for lo, c in todo if lo == load and c.engine == engine]
            if not cells:
                continue
            if budget is not None and (why := _does_not_fit(files, load, grid.n_ctx, budget)):
                for cell in cells:  # kept in the results, with the reason, instead of a crash mid-sweep
                    yield _record(static, files, grid, load, cell, None, None, f"{SKIPPED}{why}")
                continue
            events.loading(load)
            if engine == SERVER_ENGINE:
                def make_record(cell, measured, offload, error, load=load):
                    return _record(static, files, grid, load, cell, measured, offload, error)
                yield from server_engine.run_setting(files, grid, load, cells, make_record)
            else:
                yield from _run_setting(files, grid, load, cells, static)


def sized_context(files: PairFiles, grid: Grid, events: SweepEvents = SweepEvents()) -> Grid:
    """The grid with a context that holds the deepest filler, the longest prompt, the output and a verify batch
    (--ctx-size when it already does: rounded up to 256 tokens otherwise, and said); one line when the models were
    trained on less."""
    with Vocabulary(files.target) as vocab:
        longest = max(len(vocab.tokenize(vocab.chat_prompt(p.text) if p.chat and vocab.has_chat_template() else p.text))
                      for p in grid.prompts)
    k_max = max(NGRAM_CACHE_K if s.spec_type == "ngram-cache" else s.max_k(k) for s in grid.strategies for k in grid.ks)
    need = max(grid.depths) + longest + grid.n_predict + k_max + 1
    if need <= grid.n_ctx:
        return grid
    trained = min([n for f in (files.target, files.draft) if f and (n := read_info(f).context_length)], default=None)
    if trained and need > trained:
        raise ConfigError(f"depth {max(grid.depths)} + the longest prompt ({longest} tokens) + -n {grid.n_predict} + a "
                          f"verify batch need {need} tokens of context, more than the models were trained on ({trained}); "
                          "lower -d/--depth or -n")
    n_ctx = -(-need // 256) * 256
    depth = f"depth {max(grid.depths)} + " if max(grid.depths) else ""
    events.note(f"--ctx-size {grid.n_ctx} cannot hold {depth}the longest prompt ({longest} tokens) + -n {grid.n_predict} + "
                f"a verify batch: running with -c {n_ctx}")
    return replace(grid, n_ctx=n_ctx)


def _device_budget(grid: Grid) -> int | None:
    """Bytes a setting may put on the device: --vram, else what this build's first GPU device reports; None on a
    CPU-only build (which ignores -ngl)."""
    if grid.vram is not None:
        return grid.vram
    gpus = gpu_devices() if any(lo.ngl or lo.ngld for lo in grid.settings()) else []
    return gpus[0].memory_total if gpus else None


def _does_not_fit(files: PairFiles, load: LoadConfig, n_ctx: int, budget: int) -> str | None:
    """Why this offload setting cannot fit the device (models/memory.py's prediction from the headers), or None."""
    if not (load.ngl or load.ngld):
        return None
    target = Shape.from_header(*tensor_table(files.target))
    draft = Shape.from_header(*tensor_table(files.draft)) if files.draft else None
    why = fits(target, draft, load.ngl, load.ngld, n_ctx, budget)
    return f"{load.label}: {why}; lower -ngl/-ngld or --ctx-size" if why else None


def _run_setting(files: PairFiles, grid: Grid, load: LoadConfig, cells: list[Cell], static: dict) -> Iterator[RunRecord]:
    try:
        pair = LoadedPair(files, load)
    except (BenchError, MemoryError, OSError) as exc:
        for cell in cells:
            yield _record(static, files, grid, load, cell, None, None, f"model load failed: {exc}")
        return
    with pair:
        # chat prompts go through the target's template; a model without one gets the plain text
        chat_ok = pair.target.has_chat_template()
        tokens = {p.id: pair.prompt_tokens(p.text, p.chat and chat_ok) for p in grid.prompts}
        k_max = max(s.max_k(k) for s in grid.strategies for k in grid.ks)
        for p in grid.prompts:
            pair.check_fits(max(grid.depths) + len(tokens[p.id]), grid.n_predict, k_max)
        _warm_up(pair, tokens[grid.prompts[0].id], grid)
        offload = pair.offload()
        greedy_target: dict[tuple, list[int]] = {}  # (prompt id, depth) -> the target alone's greedy tokens
        for depth in sorted({c.depth for c in cells}):
            filler = pair.at_depth(depth)  # the same filler in both models, prefilled untimed
            at_depth = {pid: after_filler(t, filler) for pid, t in tokens.items()}
            for cell in (c for c in cells if c.depth == depth):
                yield _measure_cell(pair, grid, load, cell, at_depth[cell.prompt.id], greedy_target, offload, static, files)


def _measure_cell(pair: LoadedPair, grid: Grid, load: LoadConfig, cell: Cell, prompt: list[int], greedy_target: dict,
                  offload: Offload, static: dict, files: PairFiles) -> RunRecord:
    cfg = cell.config(grid, load).sampling()
    key = (cell.prompt.id, cell.depth)
    try:
        with LoadMeter() as meter:
            res = pair.generate(cell.mode, prompt, grid.n_predict, cell.k, cfg, verify=grid.verify, strategy=cell.strategy)
        identity = None
        if cfg.greedy and cell.mode == Mode.TARGET:
            greedy_target[key] = res.tokens
        if cfg.greedy and cell.mode == Mode.SPECULATIVE:
            identity = _identity(pair, prompt, res, grid, greedy_target, key)
        measured = RunMetrics.from_result(res, pair.target.detokenize(res.tokens), identity)
        return replace(_record(static, files, grid, load, cell, measured, offload, None), load=meter.load)
    except (BenchError, MemoryError) as exc:
        return _record(static, files, grid, load, cell, None, offload, str(exc))


def _identity(pair: LoadedPair, prompt: list[int], spec, grid: Grid, greedy_target: dict, key: tuple) -> Identity:
    """Whether a greedy speculative run gave the target alone's text; if not, where and why (after timing)."""
    if key not in greedy_target:  # resumed sweep: the target cell ran in an earlier process
        greedy_target[key] = pair.generate(Mode.TARGET, prompt, grid.n_predict, 0, SamplingConfig()).tokens
    return compare_greedy(pair.target, prompt, greedy_target[key], spec)


def _warm_up(pair: LoadedPair, prompt: list[int], grid: Grid) -> None:
    """One short run through both models (every drafter), so the first measured cell pays no start-up costs."""
    cfg = SamplingConfig(grid.temperatures[0], grid.top_k, grid.top_p, grid.seed)
    costly = [s for s in grid.strategies if s.k_schedule == "cost"]
    if costly:  # the cost schedule's step costs: tune's calibration, else measured here, before any cell is timed
        pair.step_costs(prompt, grid.n_predict, max(s.max_k(k) for s in costly for k in grid.ks))
    for strategy in {s.spec_type: s for s in grid.strategies}.values():  # each drafter once (the n-gram decodes nothing)
        pair.generate(Mode.SPECULATIVE, prompt, min(16, grid.n_predict), max(grid.ks), cfg, strategy=strategy)


def _record(static: dict, files: PairFiles, grid: Grid, load: LoadConfig, cell: Cell, measured: RunMetrics | None,
            offload: Offload | None, error: str | None) -> RunRecord:
    config = cell.config(grid, load)
    return RunRecord(cell=cell_key(files.name, files, config, cell.mode), time=now_iso(), **static, mode=cell.mode,
                     config=config, metrics=measured, offload=offload, error=error)


def _check_memory(files: PairFiles, grid: Grid) -> None:
    """On a CPU-only setting both files must fit in available memory; say so before starting."""
    if any(load.ngl or load.ngld for load in grid.settings()):
        return  # with offload, part of the weights go to the GPU: let llama.cpp decide
    need = files.target.stat().st_size + (files.draft.stat().st_size if files.draft else 0)
    avail = _available_memory()
    if avail is not None and need > avail:
        raise BenchError(f"the pair needs about {need / 1e9:.1f} GB of memory but {avail / 1e9:.1f} GB is available; "
                         "free memory, offload layers to a GPU (-ngl/-ngld), or choose smaller quants")


def _available_memory() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def single_run_grid(k: int, ngl: str, ngld: str, temperature: float, prompt: Prompt, **kw) -> Grid:
    """The grid of `gguf-bench run`: one setting, one K, one prompt (and one strategy: strategies=[...] in kw)."""
    return Grid(ks=[k], ngls=[options.layers(ngl)], nglds=[options.layers(ngld)], temperatures=[temperature],
                prompts=[prompt], **kw)


def measured(records: list[RunRecord], what: str | None = None) -> list[RunRecord]:
    """`records`, unless every one of them failed: then the first error is the error (`what` says who failed)."""
    failed = [r for r in records if r.error]
    if records and len(failed) == len(records):
        raise BenchError(f"{what}: {failed[0].error}" if what else str(failed[0].error))
    return records
