"""The server engine: a grid's cells measured through llama.cpp's llama-server (runtimes/llama_server.py).

llama-server fixes its drafting when it starts, so the cells of one offload setting are grouped by what the process
needs (the target alone, or one strategy and K) and each group gets its own process; inside a group the prompts,
temperatures and repetitions go through `/completion` one after another, cold (no prompt cache; at a depth only the
filler is cached: server_clients.fill_slots). The prompts are the loop's very token ids (measure/inputs/prepared.py).
Greedy speculative output is compared with the same engine's target alone; both engines' text is compared by `report`.

It runs every llama-server --spec-type (strategy.SERVER_SPEC_TYPES, sized from -K as llama_server.SIZE_FLAGS says;
the loop's `draft` and `ngram` are llama-server's draft-simple and ngram-simple). The types whose n-gram state outlives
a request (ngram-mod's pool, shared by all slots, and the map and cache types) get a new process per run unless
--warm-pool, so each run starts cold and its record says which. With --parallel/--clients a cell is a round: as many
clients as asked send their prompts at the same moment to a server with that many slots (runtimes/server_clients.py).

What it cannot do the way the Python loop does, and says so instead of measuring something else:
- only a fixed K (no adaptive schedule) and no n-gram-then-model chain; its own n-gram drafting (ngram-simple);
- at T > 0 it verifies by sample-and-compare (`common_sampler_sample_and_accept_n`), not by rejection sampling:
  its acceptance at T > 0 is lower by design, and records say `verify: sample-and-compare`;
- no time split (llama_decode vs the rest), no draft-alone runs, no per-position "reached" counts.
"""

from __future__ import annotations

import os
import re
import subprocess
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

from gguf_bench.decoding.divergence import Identity
from gguf_bench.decoding.strategy import DEFAULT_STRATEGY, SERVER_CHAIN, Strategy
from gguf_bench.engine_registry import of
from gguf_bench.errors import ConfigError
from gguf_bench.measure import capacity
from gguf_bench.measure.engines.server_figures import greedy_identity, metrics, round_metrics
from gguf_bench.measure.inputs.prepared import PreparedPrompts
from gguf_bench.measure.pair import LoadConfig, PairFiles, local_pairs
from gguf_bench.measure.plan import Cell, Grid, Setting, counterbalanced, shuffled
from gguf_bench.measure.trackers import Tracked, track
from gguf_bench.models.heads import block_k_limit, chained_k_limit, mtp_heads, sidecar_file_mismatch
from gguf_bench.models.offload_plan import Budget
from gguf_bench.models.parts import tensor_table
from gguf_bench.models.twin import is_twin_file
from gguf_bench.options import layers_label
from gguf_bench.results.schema.parts.offload import Offload
from gguf_bench.results.schema.parts.order import BLOCKS
from gguf_bench.results.schema.parts.provenance import Build
from gguf_bench.results.schema.parts.server_process import Server as ServerRecord
from gguf_bench.results.schema.records import SERVER_ENGINE, Mode, RunMetrics, RunRecord
from gguf_bench.runtimes import build_id, rpc
from gguf_bench.runtimes.llama_cpp import read_info, use_extra_buffers
from gguf_bench.runtimes.llama_server import (
    NGRAM_MOD_MATCH,
    Launch,
    Sampling,
    Server,
    ServerError,
    Speculation,
    help_text,
    probe,
)
from gguf_bench.runtimes.placement import Placement
from gguf_bench.runtimes.rpc_link import links
from gguf_bench.runtimes.server_build import find_server
from gguf_bench.runtimes.server_clients import fill_slots, run_round

LOOP_TYPES = {"draft": "draft-simple", "ngram": "ngram-simple"}  # the loop's strategies as llama-server's types


def server_type(strategy: Strategy) -> str:
    return LOOP_TYPES.get(strategy.spec_type, strategy.spec_type).replace(SERVER_CHAIN, ",")


def speculation(mode: Mode, strategy: Strategy | None, k: int) -> Speculation:
    if mode != Mode.SPECULATIVE:
        return Speculation()
    strategy.check_server()
    return Speculation(server_type(strategy), k, strategy.p_min, strategy.n_min, strategy.ngram_max)


def check_files(strategies: list[Strategy], files: PairFiles, server_help: str) -> None:
    """One line for a type this binary lacks or these files cannot serve."""
    for spec_type in dict.fromkeys(t for strategy in strategies for t in server_type(strategy).split(",")):
        if not re.search(rf"(?<![\w-]){re.escape(spec_type)}(?![\w-])", server_help):
            raise ConfigError(f"this llama-server has no --spec-type {spec_type} (its --help does not list it); build a "
                              "newer one with `gguf-bench build-server` or pass --server-bin")
        if spec_type == "draft-mtp" and not _has_nextn(files.target):
            raise ConfigError(f"--spec-type draft-mtp drafts with the target's MTP/NextN heads, and {files.target.name} "
                              f"has none (llama.cpp reads them from {_architecture(files.target)}.nextn_predict_layers "
                              "and the last block's nextn.eh_proj); choose a model trained with MTP or another type")
        sidecar = {"draft-eagle3": "eagle3", "draft-dflash": "dflash", "draft-dspark": "dflash"}.get(spec_type)
        if sidecar and files.draft is not None and (arch := _architecture(files.draft)) != sidecar:
            raise ConfigError(f"--spec-type {spec_type} needs a {sidecar} sidecar GGUF as the draft (--draft FILE); "
                              f"{files.draft.name} is a {arch} model")
        if sidecar and files.draft is not None and (why := sidecar_file_mismatch(files.draft, files.target)):
            raise ConfigError(f"{files.draft.name} is not a sidecar for {files.target.name}: {why}; give the "
                              f"{sidecar} sidecar converted for this target (--target-model-dir of its converter)")
        if spec_type == "draft-dspark" and files.draft is not None and not _has_markov_head(files.draft):
            raise ConfigError(f"--spec-type draft-dspark needs a DSpark sidecar (a dflash GGUF with markov_w1); "
                              f"{files.draft.name} has no Markov head: it is a draft-dflash sidecar")


def _has_nextn(path: Path) -> bool:
    """llama.cpp's reading of MTP heads (models/heads.py: the rule `drafts` lists draft-mtp by)."""
    meta, tensors = tensor_table(path)
    return mtp_heads(meta, (t.name for t in tensors)) > 0


def check_draft_k(strategies: list[Strategy], ks: list[int], files: PairFiles) -> None:
    """One line for a -K the drafter cannot reach: chained MTP heads draft at most their count, a DFlash/DSpark sidecar
    one trained block; llama.cpp clamps --spec-draft-n-max to either without a word (models/heads.py), and the cell
    would be recorded at a K it did not run."""
    if not ks:
        return
    types = {t for s in strategies for t in server_type(s).split(",")}
    if "draft-mtp" in types:
        meta, tensors = tensor_table(files.target)
        limit = chained_k_limit(meta, (t.name for t in tensors))
        if limit is not None and max(ks) > limit:
            raise ConfigError(f"-K {max(ks)}: {files.target.name} has {limit} chained MTP heads (one per draft step), "
                              f"and llama.cpp's draft-mtp drafts at most {limit} with them; give -K up to {limit}")
    for spec_type in sorted(types & {"draft-dflash", "draft-dspark"}):
        limit = block_k_limit(tensor_table(files.draft)[0], spec_type) if files.draft is not None else None
        if limit is not None and max(ks) > limit:
            raise ConfigError(f"-K {max(ks)}: llama.cpp's {spec_type} drafts at most {limit} tokens with "
                              f"{files.draft.name} (one block of its dflash.block_size); give -K up to {limit}")


def _has_markov_head(path: Path) -> bool:
    return any(t.name == "markov_w1.weight" for t in tensor_table(path)[1])


def _architecture(path: Path) -> str:
    return str(tensor_table(path)[0].get("general.architecture", "unknown"))


@dataclass
class Binary:
    """One llama-server build (llama-server, or the unified `llama` run as `llama serve`): the file, the environment it
    runs in, what it says of itself, and the build its records name (its system_info from its first process's log)."""

    path: Path
    env: dict[str, str]
    version: str  # its --version text
    help: str
    build: Build

    @classmethod
    def found(cls, given: Path | None, need_rpc: bool = False) -> Binary:
        """--server-bin's binary (one line where it is not an executable), else the one found (server_build)."""
        path, env = find_server(given, need_rpc)
        version = probe(path, env)
        return cls(path, env, version, help_text(path, env), Build(**build_id.of_server(path, version, [])))


class ServerEngine:
    """Finds and checks the binary once (each one, where --server-bin lists several builds); then opens settings."""

    name = SERVER_ENGINE
    capabilities = of(SERVER_ENGINE)

    measured = staticmethod(local_pairs)  # what a sweep measures: the pairs on this machine

    @classmethod
    def for_grid(cls, grid: Grid, files: PairFiles) -> ServerEngine:
        """The engine a grid needs (its one binary, or each of its builds: Grid.server_bins), checked against the files
        and placements it will run."""
        builds = tuple(b for b in grid.server_bins if b is not None)
        engine = cls(None if builds else grid.options_of(SERVER_ENGINE).server_bin,
                     need_rpc=any(p.rpc for p in grid.placings), builds=builds)
        engine.check_files(grid.strategies, files, grid.ks)
        engine.check_placements(grid)
        return engine

    def __init__(self, binary: Path | None = None, need_rpc: bool = False, builds: tuple[Path, ...] = ()):
        """need_rpc: some setting has --rpc (the RPC build, unless --server-bin). builds: --server-bin A,B, each load's
        own (LoadConfig.server_bin), each found and probed now; the first is the default."""
        self.builds = {given: Binary.found(given, need_rpc) for given in builds}
        first = next(iter(self.builds.values()), None) or Binary.found(binary, need_rpc)
        self.default = first
        self.binary, self.env, self.version, self.help, self.build = (first.path, first.env, first.version, first.help,
                                                                      first.build)
        self.devices: dict[tuple[str, ...], list[rpc.Device]] = {}  # per --rpc list: the devices it gives llama-server

    def binary_of(self, load: LoadConfig) -> Binary:
        """The build a load runs: its own --server-bin where the sweep lists several, else the engine's one."""
        return self.builds[load.server_bin] if load.server_bin is not None else self.default

    def check_files(self, strategies: list[Strategy], files: PairFiles, ks: list[int] | None = None) -> None:
        """One line for a type a binary lacks (each build's --help) or these files cannot serve."""
        for binary in self.builds.values() or [self.default]:
            check_files(strategies, files, binary.help)
        check_draft_k(strategies, list(ks or []), files)

    def check_placements(self, grid: Grid) -> None:
        """Before anything loads, each --rpc list's servers reached and their devices listed; then each placement's
        device names, -ts and -mg checked against them (one line for the first that does not fit)."""
        for placing in grid.placings:
            if placing.rpc and placing.rpc not in self.devices:
                rpc.check_reachable(placing.rpc)
                self.devices[placing.rpc] = rpc.list_devices(self.binary, self.env, placing.rpc)
        have = "llama-server with these RPC servers"
        for placing in grid.placings:
            if placing.rpc:
                names = [d.name for d in self.devices[placing.rpc]]
                placing.check_devices(names, have=have)
                for draft in grid.placings_draft:
                    draft.check_devices(names, draft=True, have=have)

    def open(self, setting: Setting, prompts: PreparedPrompts) -> ServerSession:
        return ServerSession(self, setting, prompts)

    def launch(self, files: PairFiles, load: LoadConfig, spec: Speculation, parallel: int = 1,
               endpoints: tuple[str, ...] | None = None, binary: Path | None = None) -> Launch:
        """endpoints: the RPC servers to connect to in place of the setting's (its delaying proxies); binary: the load's
        build (binary_of), else the engine's."""
        return Launch(binary or self.binary, files.target, files.draft, spec, str(layers_label(load.ngl)),
                      str(layers_label(load.ngld)), load.n_ctx, load.threads or os.cpu_count() or 1,
                      repack=use_extra_buffers(), **load.server_context, parallel=parallel,
                      placing=tuple(load.placing.flags()), placing_draft=tuple(load.placing_draft.flags(draft=True)),
                      rpc=load.placing.rpc if endpoints is None else endpoints)


@dataclass
class _Process:
    """One llama-server process and what every cell it measures shares; `failure`: why none of them can run."""

    key: tuple | None  # what the process was started for (None: one cell only, a cold n-gram pool)
    server: Server | None = None
    failure: str | None = None  # it did not start, or started without the draft it was asked for
    offload: Offload | None = None
    info: ServerRecord | None = None
    died: str | None = None  # the error of the cell it died in: the cells after it fail with it


class ServerSession:
    """The cells of one setting through llama-server: a process per (mode, strategy, K, slots), started when the
    first cell that needs it comes. Where the memory holds them all (the setting's processes at one slot count), they
    run side by side, each idle while another is measured, and the requests go to them in turn ('alternate'); else one
    at a time, in counterbalanced blocks ('blocks')."""

    def __init__(self, engine: ServerEngine, setting: Setting, prompts: PreparedPrompts):
        self.engine, self.setting, self.prompts, self.grid = engine, setting, prompts, setting.grid
        self.options = setting.grid.options_of(SERVER_ENGINE)  # its own: --warm-pool, --request-timeout
        self.binary = engine.binary_of(setting.load)  # the build it runs (each of --server-bin A,B: a setting)
        files = setting.files
        self.twin = is_twin_file(files.target)  # generates to -n whatever token comes
        # the layers llama.cpp's load log counts (every block, MTP ones too, and the output): where a build logs no
        # "offloaded N/M layers" line (no GPU device), the record's count is still llama.cpp's
        self.layers = (_blocks(files.target), _blocks(files.draft) if files.draft else None)
        self.processes: dict[tuple, _Process] = {}  # the processes running, least recently used first
        self.capacity = 1  # how many may run at once (order() decides)
        self.design = BLOCKS
        self.targets: set[int | None] = set()  # the slot counts whose target alone this order measures (order())
        self._links = ExitStack()  # the delaying proxies of --rpc-delay, for the whole setting
        self.endpoints: tuple[str, ...] | None = None  # what llama-server connects to (None: not yet opened)

    def order(self, cells: list[Cell]) -> list[Cell]:
        """'alternate' (plan.shuffled: block by block, each block in a seeded random order) where every process one
        slot count needs fits at once (processes_fit), else 'blocks' (plan.counterbalanced: one repetition at a time,
        A B | B A ...)."""
        need = max(len({_group(c) for c in level}) for level in _levels(cells).values())
        self.targets = {c.parallel for c in cells if c.mode == Mode.TARGET}  # slot counts with a target-alone process
        if need > 1 and not self.setting.load.placing.rpc and processes_fit(self.setting, need):  # an RPC server
            # serves one client at a time: the processes of an RPC setting take turns (blocks)
            self.design, self.capacity = "alternate", need
            return shuffled(cells, self.grid.seed)
        self.design, self.capacity = ("alternate", 1) if need == 1 else (BLOCKS, 1)
        return counterbalanced(cells, _group)

    def measure(self, cell: Cell) -> RunRecord:
        key = _process_key(cell, self.options.warm_pool)
        proc = self.processes.pop(key, None) if key is not None else None
        proc = proc or self._start(cell, key)
        if key is not None:
            self.processes[key] = proc  # the most recently used last
        try:
            return self._measure(proc, cell)
        finally:
            if key is None:  # a cold n-gram pool: this run's own process
                _stop(proc)

    def _measure(self, proc: _Process, cell: Cell) -> RunRecord:
        record = self.setting.record
        if proc.failure:
            return record(cell, error=proc.failure, build=self.binary.build)
        if proc.died:
            return record(cell, None, proc.offload, f"llama-server died earlier in this group: {proc.died}", server=proc.info,
                          build=self.binary.build)
        measured, error, tracked = self._one(proc, cell) if cell.parallel is None else self._round(proc, cell)
        if error and _exited(proc.server):
            proc.died = error
        measured_record = record(cell, measured, proc.offload, error, server=proc.info, build=self.binary.build)
        return tracked.fill(measured_record) if tracked else measured_record

    def close(self) -> None:
        """The running processes stop (their logs go unless one failed to start), then the setting's proxies."""
        while self.processes:
            _stop(self.processes.pop(next(iter(self.processes))))
        self._links.close()

    def _start(self, first: Cell, key: tuple | None) -> _Process:
        """A new process for `first`'s group; the least recently used ones stop first where the capacity is reached."""
        while self.processes and len(self.processes) + 1 > self.capacity:
            _stop(self.processes.pop(next(iter(self.processes))))
        placing = self.setting.load.placing
        if self.endpoints is None:
            self.endpoints = self._links.enter_context(links(placing.rpc, placing.rpc_delay_ms))
        spec = speculation(first.mode, first.strategy if first.mode == Mode.SPECULATIVE else None, first.k)
        proc = _Process(key)
        launch = self.engine.launch(self.setting.files, self.setting.load, spec, first.parallel or 1, self.endpoints,
                                    self.binary.path)
        try:
            proc.server = server = Server(launch, self.binary.env)
        except ServerError as exc:
            proc.failure = f"llama-server failed to start: {_gone(placing.rpc) or exc}"
            return proc
        if first.mode == Mode.SPECULATIVE and not server.speculative:  # never report a plain run as a speculative one
            proc.failure = f"llama-server started without a draft context (/slots: speculative false); its log: {server.log_path}"
            return proc
        if self.binary.build.system_info is None:  # llama_print_system_info(), as the server logs it at start
            self.binary.build.system_info = build_id.system_info_from_log(server.load_log())
        layers = self.layers if first.mode == Mode.SPECULATIVE else (self.layers[0], None)
        names = rpc.buffer_names(self.engine.devices.get(placing.rpc, []), placing.rpc, self.endpoints)
        target_pl, draft_pl = (_renamed(p, names) for p in server.placements(*layers))
        proc.offload = Offload(target_pl.layers, draft_pl.layers if draft_pl else "-", target_pl, draft_pl)
        pool = ("warm" if self.options.warm_pool else "cold") if spec.pooled else None
        command = replace(launch, port=server.launch.port, rpc=placing.rpc).argv()  # the servers' own addresses
        proc.info = ServerRecord(command=command, version=self.binary.version,
                                 build_info=str(server.props.get("build_info")), speculative=server.speculative, pool=pool)
        if (warm_up := self._warm_up(first, spec, pool)) is not None:
            try:
                server.complete(*warm_up, _sampling(first, self.grid, self.twin), cache_prompt=first.depth > 0)
            except ServerError as exc:  # it died warming up (an RPC server gone, a kill): its cells fail, one line each
                proc.died = str(exc)
        return proc

    def _warm_up(self, first: Cell, spec: Speculation, pool: str | None) -> tuple[list[int], int] | None:
        """The warm-up request of a new process (prompt, tokens to generate) before its measured runs: the first cell's
        prompt and up to 16 tokens; for a cold ngram-mod pool a request too short to reach it (prompt and output under
        its NGRAM_MOD_MATCH-token lookup: llama.cpp adds nothing to the pool and drafts nothing below that); None for
        the other cold pools, which a request would fill (llama-server's own warm-up decode at load is all they get)."""
        prompt = self.prompts.whole(first.prompt.id, first.depth)
        if pool != "cold":
            return prompt, min(16, self.grid.n_predict)
        if spec.spec_type == "ngram-mod" and first.depth == 0:
            half = (NGRAM_MOD_MATCH - 1) // 2
            return prompt[:half], min(half, self.grid.n_predict)
        return None

    def _one(self, proc: _Process, cell: Cell) -> tuple[RunMetrics | None, str | None, Tracked | None]:
        """One request, alone on one slot."""
        sampling, server = _sampling(cell, self.grid, self.twin), proc.server
        try:
            fill_slots(server, self.prompts.filler_at(cell.depth), cell.parallel or 1, sampling)
            with track(self.grid.trackers, server.proc.pid) as tracked:
                comp = server.complete(self.prompts.whole(cell.prompt.id, cell.depth), self.grid.n_predict, sampling,
                                       cache_prompt=cell.depth > 0)
        except ServerError as exc:
            return None, str(exc), None
        return metrics(comp, cell, self._identity(cell, comp.tokens, sampling.temperature)), None, tracked

    def _round(self, proc: _Process, cell: Cell) -> tuple[RunMetrics | None, str | None, Tracked | None]:
        """`cell.clients` requests at the same moment: the cell's prompt and the ones after it, in turn."""
        sampling = _sampling(cell, self.grid, self.twin)
        ids = [p.id for p in self.grid.prompts]
        start = ids.index(cell.prompt.id)
        prompts = [(pid, self.prompts.whole(pid, cell.depth))
                   for pid in (ids[(start + i) % len(ids)] for i in range(cell.clients))]
        server = proc.server
        try:
            fill_slots(server, self.prompts.filler_at(cell.depth), cell.parallel or 1, sampling)
            with track(self.grid.trackers, server.proc.pid) as tracked:
                rnd = run_round(server, prompts, self.grid.n_predict, sampling,
                                self.options.request_timeout_s, cache_prompt=cell.depth > 0)
        except ServerError as exc:  # it was gone before the round began
            return None, str(exc), None
        failed = [r for r in rnd.requests if r.error]
        first = rnd.requests[0]
        identity = self._identity(cell, first.tokens, sampling.temperature) if not first.error else None
        measured = round_metrics(rnd, cell, identity)
        if failed:  # the finished requests' figures stay in the record; --resume runs the round again
            return measured, f"{len(failed)} of {len(rnd.requests)} requests failed: {failed[0].error}", tracked
        return measured, None, tracked

    def _identity(self, cell: Cell, tokens: list[int], temperature: float) -> Identity | None:
        if temperature > 0:
            return None
        greedy, key = self.prompts.greedy, (self.setting.load, cell.baseline)
        if cell.mode == Mode.TARGET:
            greedy[key] = tokens
            return None
        if key not in greedy and self.capacity > 1 and cell.parallel in self.targets:  # its process is one of those held
            self._reference(cell)
        return greedy_identity(greedy[key], tokens) if key in greedy else None

    def _reference(self, cell: Cell) -> None:
        """The target alone's greedy text for a speculative cell measured before its target alone (plan.shuffled forces
        no cell first): the same request (or round) to the target's process, untimed and not recorded. Only where the
        processes run side by side ('alternate'): in 'blocks' starting it would stop the process being measured, and
        the target's group leads each even repetition there, so only a resumed sweep can lack it (no identity then)."""
        target = replace(cell, mode=Mode.TARGET, k=0, strategy=DEFAULT_STRATEGY)
        key = _process_key(target, self.options.warm_pool)
        proc = self.processes.pop(key, None) or self._start(target, key)
        self.processes[key] = proc
        if proc.failure or proc.died:
            return
        if target.parallel is None:  # _identity keeps the target's tokens
            self._one(proc, target)
        else:
            self._round(proc, target)


def _stop(proc: _Process) -> None:
    """A process stops; its log goes unless it failed to start."""
    if proc.server is not None:
        proc.server.close()
        proc.server.remove_log()


def _group(cell: Cell) -> tuple:
    """What a cell's process is started for, a cold pool's runs included (they share a setting, not a process)."""
    return cell.mode, cell.strategy if cell.mode == Mode.SPECULATIVE else None, cell.k, cell.parallel


def _levels(cells: list[Cell]) -> dict[tuple, list[Cell]]:
    levels: dict[tuple, list[Cell]] = {}
    for cell in cells:
        levels.setdefault((cell.parallel, cell.clients), []).append(cell)
    return levels


def processes_fit(setting: Setting, count: int) -> bool:
    """Whether `count` llama-server processes of this setting can run at once: on a CPU-only setting each one's model
    files (the target, and the draft where it has one) within 80% of the memory available now; with offload, each
    process within an equal share of the device budget (capacity.does_not_fit, the planner's figures)."""
    files, load = setting.files, setting.load
    budget = capacity.device_budget(setting.grid)
    if budget is not None and (load.ngl or load.ngld):
        share = Budget(tuple((name, size // count) for name, size in budget.devices))
        if capacity.does_not_fit(files, load, setting.grid.n_ctx, share):
            return False
    avail = capacity.available_memory()
    need = count * (files.target.stat().st_size + (files.draft.stat().st_size if files.draft else 0))
    return avail is None or need <= 0.8 * avail


def _gone(endpoints: tuple[str, ...]) -> str | None:
    """Why llama-server could not start, where an RPC server is gone (llama.cpp itself only says that a call failed)."""
    try:
        rpc.check_reachable(endpoints)
    except ConfigError as exc:
        return str(exc)
    return None


def _renamed(p: Placement | None, names: dict[str, str]) -> Placement | None:
    """A placement with llama.cpp's RPC buffer names as the client's device names (rpc.buffer_names)."""
    if p is None or not names:
        return p
    parts = ("model_mib", "kv_mib", "compute_mib", "output_mib")
    return replace(p, **{part: {names.get(k, k): v for k, v in getattr(p, part).items()} for part in parts})


def _exited(server: Server, grace_s: float = 1.0) -> bool:
    """Whether the server process has ended, given a moment: its clients see their connections close while the kernel
    is still tearing it down, before it can be waited for."""
    try:
        server.proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        return False
    return True


def _sampling(cell: Cell, grid: Grid, twin: bool = False) -> Sampling:
    cfg = cell.sampling(grid)
    return Sampling(cfg.temperature, cfg.top_k, cfg.top_p, cfg.seed, ignore_eos=twin)


def _blocks(path) -> int:
    """A model's blocks as llama.cpp's offload line counts them (block_count: MTP blocks included)."""
    info = read_info(path)
    return info.n_blocks or info.n_layers


def _process_key(cell: Cell, warm_pool: bool) -> tuple | None:
    """What the process a cell needs is started for: (mode, strategy, K, slots); None for a type whose n-gram state
    outlives a request, which gets a process of its own (a cold pool) unless warm_pool."""
    strategy = cell.strategy if cell.mode == Mode.SPECULATIVE else None
    if strategy is not None and not warm_pool and speculation(cell.mode, strategy, cell.k).pooled:
        return None
    return cell.mode, strategy, cell.k, cell.parallel
