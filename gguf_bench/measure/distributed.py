"""Sweeps across machines on Ray.

The unit of work is one pair under one offload setting: it loads both models once and runs that
setting's cells, as a local sweep does. Each unit becomes a Ray streaming generator task that asks
for the resources its setting needs, finds or fetches its pair on its own node (as `download` does),
and yields one record per cell. Ray is a way of running units, not a sweep of its own: the driver's records go through
the one sweep (sweep.run_sweep: the lock, --resume's check, the store), which alone appends them to results/NAME.jsonl.

Nothing is lost or written twice:
- `--resume`: the driver sends each unit the keys of its cells already in the file; the unit skips them.
- A unit whose node dies is retried elsewhere by Ray (`max_retries`). Ray re-runs the generator and
  drops the items it already delivered, by position; so that the retry does not measure those cells
  again, it asks a small ledger actor (beside the driver) which of its cells the driver has written,
  and yields a placeholder in their place, keeping every item where the first attempt had it.
- The driver drops any record whose cell key it has already written.

Ray is optional (`pip install -e '.[ray]'`): it is imported only when a sweep runs on it.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gguf_bench.errors import BenchError, ConfigError, ModelError
from gguf_bench.measure.pair import LoadConfig, PairFiles
from gguf_bench.measure.plan import Grid, cell_key, cells_done, cells_for
from gguf_bench.measure.sweep import Runs, SweepEvents, iter_records, run_sweep
from gguf_bench.models.pairs import PairChoice
from gguf_bench.models.registry import ModelRef, Registry
from gguf_bench.results.schema.parts.node import Node
from gguf_bench.results.schema.records import Record, RunRecord
from gguf_bench.results.schema.store import environment
from gguf_bench.runtimes.llama_cpp import quantize

INSTALL_HINT = "--ray needs Ray, which is not installed; install it with: pip install -e '.[ray]'"
ACCELERATOR_PREFIX = "accelerator_type:"  # Ray's node resource naming the GPU model, e.g. accelerator_type:A100
HOST_ENV = "GGUF_BENCH_HOST"  # a name for a node in the records (default: its hostname)


def import_ray() -> Any:
    """The `ray` module, or a one-line BenchError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise BenchError(INSTALL_HINT) from None
    return ray


# --- options --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RayOptions:
    address: str = "auto"  # 'auto': the cluster this machine belongs to; 'local': start one here; or HOST:PORT
    gpus_per_task: float | None = None  # None: 1 when the setting offloads any layer, else 0
    resources: dict[str, float] = field(default_factory=dict)  # custom node resources each unit needs
    accelerator_type: str | None = None  # Ray's accelerator type, e.g. 'A100' (from accelerator_type:A100)
    max_retries: int = 3  # times Ray reruns a unit whose node or worker died

    def __post_init__(self) -> None:
        if self.gpus_per_task is not None and self.gpus_per_task < 0:
            raise ConfigError(f"--ray-gpus-per-task must be >= 0, got {self.gpus_per_task:g}")


def parse_resources(spec: str | None) -> tuple[dict[str, float], str | None]:
    """'KEY:N,...' -> ({KEY: N}, accelerator type); 'accelerator_type:A100' names a GPU model; a bare KEY means 1."""
    resources: dict[str, float] = {}
    accelerator = None
    for item in (spec or "").replace(" ", "").split(","):
        if not item:
            continue
        if item.startswith(ACCELERATOR_PREFIX):
            accelerator = item[len(ACCELERATOR_PREFIX):].split(":")[0]
            if not accelerator:
                raise ConfigError("--ray-resources accelerator_type needs a GPU model, like accelerator_type:A100")
            continue
        key, sep, amount = item.rpartition(":")
        key, amount = (key, amount) if sep else (item, "1")
        try:
            n = float(amount)
        except ValueError:
            n = math.nan
        if not key or not n > 0 or math.isinf(n):
            raise ConfigError(f"bad --ray-resources item '{item}': use KEY:N with N > 0, like gpu_box:1 or accelerator_type:A100")
        if key.upper() in ("CPU", "GPU"):
            raise ConfigError("--ray-resources takes custom resources; CPUs follow --threads and GPUs --ray-gpus-per-task")
        resources[key] = n
    return resources, accelerator


def task_request(load: LoadConfig, grid: Grid, options: RayOptions) -> dict[str, float]:
    """What one unit asks of a node: CPUs for its threads, GPUs for its offload, the custom resources."""
    offloads = bool(load.ngl or load.ngld)
    gpus = options.gpus_per_task if options.gpus_per_task is not None else (1.0 if offloads else 0.0)
    request = {"CPU": float(grid.threads or 1), "GPU": gpus, **options.resources}
    if options.accelerator_type:
        request[ACCELERATOR_PREFIX + options.accelerator_type] = 0.001  # what Ray's accelerator_type option asks
    return {k: v for k, v in request.items() if v > 0}


def _ray_options(request: dict[str, float], options: RayOptions) -> dict:
    custom = {k: v for k, v in request.items() if k not in ("CPU", "GPU") and not k.startswith(ACCELERATOR_PREFIX)}
    opts = {"num_returns": "streaming", "num_cpus": request.get("CPU", 0), "num_gpus": request.get("GPU", 0),
            "resources": custom, "max_retries": options.max_retries, "retry_exceptions": False}
    if options.accelerator_type:
        opts["accelerator_type"] = options.accelerator_type
    return opts


# --- where a unit gets its pair ----------------------------------------------------------------------


@dataclass(frozen=True)
class PairSource:
    """How a node gets a pair: registry entries it finds or fetches itself, or file paths that must exist there."""

    name: str
    target: ModelRef | Path
    draft: ModelRef | Path
    registry: Registry | None = None

    @classmethod
    def from_registry(cls, registry: Registry, pair_name: str) -> PairSource:
        pair = registry.pair(pair_name)
        return cls(pair.name, pair.target, pair.draft, registry)

    @classmethod
    def from_paths(cls, target: Path, draft: Path) -> PairSource:
        return cls(f"{target.name}+{draft.name}", Path(target).absolute(), Path(draft).absolute())

    def file_names(self) -> tuple[str, str] | None:
        """The two files' names when known without fetching (file paths); cell keys are built from them."""
        if isinstance(self.target, Path) and isinstance(self.draft, Path):
            return self.target.name, self.draft.name
        return None

    def resolve(self) -> PairFiles:
        """On the node that runs the unit: the local paths, fetched into this node's cache when missing."""
        return PairFiles(self._path(self.target), self._path(self.draft), self.name)

    def _path(self, model: ModelRef | Path) -> Path:
        if isinstance(model, Path):
            if not model.is_file():
                raise ModelError(f"model file {model} does not exist on this node; with --ray, --target/--draft "
                                 "paths must exist on every node that runs a unit (copy the files there, or name a "
                                 "registry pair so each node fetches it)")
            return model
        assert self.registry is not None
        return _fetch_on_node(model, self.registry)


def _fetch_on_node(model: ModelRef, registry: Registry) -> Path:
    """`locate`, else `fetch` under a lock in this node's cache: units running side by side on one node
    (one per GPU) would otherwise assemble or quantize the same file into the same partial file at once."""
    import fcntl

    from gguf_bench.models.download import cache_dir, fetch, locate

    if found := locate(model, registry):
        return found
    lock = cache_dir() / ".fetch.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # released when the file closes
        return locate(model, registry) or fetch(model, registry, quantize=quantize).path


def pair_sources(pairs: list[str] | None, target: Path | None, draft: Path | None,
                 registry_path: Path | None) -> list[PairSource]:
    """The CLI's pair arguments, checked on the driver without fetching anything (each node fetches its own)."""
    if target or draft:
        if not (target and draft):
            raise BenchError("--target and --draft go together: give both files, or a pair name instead")
        if pairs:
            raise BenchError("give either pair names or --target/--draft, not both")
        return [PairSource.from_paths(target, draft)]
    from gguf_bench.models.registry import load_registry

    registry = load_registry(registry_path)
    return [PairSource.from_registry(registry, p) for p in (pairs or [registry.default])]


# --- units -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairUnit:
    """One pair under one offload setting: one Ray task."""

    index: int
    pair: PairSource
    load: LoadConfig
    skip: frozenset[str]  # keys of its cells already in the results file
    todo: int  # cells left, as far as the driver can tell (all of them when it cannot name the files)

    def label(self) -> str:
        return f"{self.pair.name} {self.load.label}"


def unit_grid(grid: Grid, load: LoadConfig) -> Grid:
    """The grid of one unit: the same cells under one setting (every axis of a load: plan.LOAD_AXES, placements too)."""
    return grid.narrowed(load)


def plan_units(pairs: list[PairSource], grid: Grid, records: list[Record]) -> list[PairUnit]:
    """Every pair x offload setting, with the keys of its cells already in `records`.

    Cell keys hold the files' names: for a registry pair the driver takes them from the pair's earlier
    records (a pair with none has no cell done), so it need not fetch anything itself.
    """
    done = cells_done(records)
    names = {r.pair: (r.models.target.file, r.models.draft.file) for r in records
             if isinstance(r, RunRecord) and r.pair and r.models.target and r.models.draft}
    units = []
    for pair in pairs:
        known = pair.file_names() or names.get(pair.name)
        for load in grid.settings():
            cells = cells_for(unit_grid(grid, load))
            if known is None:
                units.append(PairUnit(len(units), pair, load, frozenset(), len(cells)))
                continue
            files = PairFiles(Path(known[0]), Path(known[1]), pair.name)
            keys = {cell_key(pair.name, files, c.config(grid, load), c.mode) for c in cells}
            units.append(PairUnit(len(units), pair, load, frozenset(keys & done), len(keys - done)))
    return units


# --- on the worker -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Written:
    """The placeholder a retried unit yields for a cell the driver has already written."""

    key: str


def unit_records(name: str, unit: PairUnit, grid: Grid, ledger: Any = None) -> Iterator[RunRecord | Written]:
    """The body of a unit's Ray task: one item per cell not in `unit.skip`, in a fixed order.

    A cell the driver has already written (asked of `ledger`, on a retry) gets a placeholder
    Written(key) instead of a new measurement, so each item keeps the position it had in the
    first attempt: Ray drops the items of a retry up to the count it already delivered.
    """
    node = node_info()
    with _naming(node):
        files = unit.pair.resolve()
    one = unit_grid(grid, unit.load)
    plan = [cell_key(files.name, files, c.config(one, unit.load), c.mode) for c in cells_for(one)]
    plan = [key for key in plan if key not in unit.skip]
    written = _written(ledger, unit.index) & set(plan)
    measured = iter_records(name, files, one, skip=set(unit.skip) | written)  # loads the models on first use
    yield from (Written(key) for key in plan if key in written)
    todo = [key for key in plan if key not in written]  # measured in the engine's order (plan.shuffled), not this one
    for _ in todo:
        with _naming(node):
            record = next(measured)
        if record.cell not in todo:
            raise BenchError(f"internal error: unit {unit.label()} measured cell {record.cell}, which was not planned")
        record.node = node
        yield record


@contextmanager
def _naming(node: Node) -> Iterator[None]:
    """Errors raised on a node say which node (the driver prints them among those of other nodes)."""
    try:
        yield
    except BenchError as exc:
        raise type(exc)(f"on {node.host} ({node.ip}): {exc}") from None


def _written(ledger: Any, unit_index: int) -> set[str]:
    """Keys of this unit that the driver has written (none on a first attempt, or if the ledger is gone)."""
    if ledger is None:
        return set()
    try:
        import ray

        return set(ray.get(ledger.keys.remote(unit_index), timeout=60))
    except Exception:  # no ledger: measure again; the driver drops what it already has
        return set()


class Ledger:
    """Cell keys the driver has written, per unit; lives on the driver's node as a Ray actor."""

    def __init__(self) -> None:
        self._keys: dict[int, set[str]] = {}

    def add(self, unit_index: int, key: str) -> None:
        self._keys.setdefault(unit_index, set()).add(key)

    def keys(self, unit_index: int) -> list[str]:
        return sorted(self._keys.get(unit_index, ()))


def node_info() -> Node:
    """Where a record was measured, computed on the node that measured it."""
    import ray

    env = environment()
    ctx = ray.get_runtime_context()
    gpu_ids = [str(i) for i in ray.get_gpu_ids()]  # the GPUs Ray gave this task (it sets CUDA_VISIBLE_DEVICES)
    gpu, gpu_memory = _assigned_gpu(gpu_ids) or (env.gpu, env.gpu_memory)
    return Node(host=os.environ.get(HOST_ENV) or socket.gethostname(), hostname=socket.gethostname(),
                ip=ray.util.get_node_ip_address(), ray_node_id=ctx.get_node_id(), gpu=gpu, gpu_memory=gpu_memory,
                gpu_count=env.gpu_count, gpu_ids=gpu_ids, cpu=env.cpu, cpu_count=env.cpu_count,
                llama_cpp_python=env.llama_cpp_python, gpu_offload=env.gpu_offload)


def _assigned_gpu(gpu_ids: list[str]) -> tuple[str, str] | None:
    """Name and memory of the first GPU Ray gave this task (a node may hold different GPUs)."""
    if not gpu_ids:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "-i", gpu_ids[0], "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    name, sep, memory = out.partition(",")
    return (name.strip(), memory.strip()) if sep else None


# --- on the driver ---------------------------------------------------------------------------------------


@dataclass
class RaySummary:
    out: Path
    units: int = 0
    written: int = 0
    dropped: int = 0  # records for cells already written (a retried unit's), not written again
    failures: list[str] = field(default_factory=list)  # one line per unit that ended in an error
    no_offload: set[str] = field(default_factory=set)  # hosts asked to offload whose llama-cpp-python cannot


def run_ray_sweep(name: str, pairs: list[PairSource], grid: Grid, out: Path, resume: bool, options: RayOptions,
                  events: SweepEvents = SweepEvents()) -> RaySummary:
    """Run every unit as a Ray task through the one sweep (sweep.run_sweep stores each record as it streams back); a
    failed unit does not stop the others."""
    summary = RaySummary(out)
    run_sweep(name, OnRay(name, pairs, grid, options, summary), grid, out, resume, events)
    return summary


class OnRay(Runs):
    """The units as Ray tasks, one per pair x setting (unit_records on a node), their records as they stream back:
    each once (a retried unit's repeats are dropped), counted in `summary`."""

    def __init__(self, name: str, pairs: list[PairSource], grid: Grid, options: RayOptions, summary: RaySummary):
        self.name, self.pairs, self.grid, self.options, self.summary = name, pairs, grid, options, summary

    def records(self, stored: list, events: SweepEvents) -> Iterator[RunRecord]:
        ray, summary, grid = import_ray(), self.summary, self.grid
        written = cells_done(stored)
        units = plan_units(self.pairs, grid, stored)
        todo = [u for u in units if u.todo]
        events.start(sum(u.todo for u in todo), sum(len(u.skip) for u in units), len(written))
        summary.units = len(todo)
        if not todo:
            return
        with _connected(ray, self.options.address):
            requests = {u.index: task_request(u.load, grid, self.options) for u in todo}
            _check_feasible(ray, list(requests.values()), self.options.address)
            ledger = _start_ledger(ray)
            task = ray.remote(unit_records)
            streams = {task.options(**_ray_options(requests[u.index], self.options)).remote(self.name, u, grid, ledger): u
                       for u in todo}
            while streams:
                ready, _ = ray.wait(list(streams), num_returns=1)
                unit = streams[ready[0]]
                try:
                    item = ray.get(next(ready[0]))
                except StopIteration:
                    del streams[ready[0]]
                    continue
                except ray.exceptions.RayError as exc:
                    summary.failures.append(f"{unit.label()}: {_one_line(exc)}")
                    del streams[ready[0]]
                    continue
                if not isinstance(item, RunRecord) or item.cell in written:
                    summary.dropped += isinstance(item, RunRecord)
                    continue
                yield item  # stored by run_sweep before this goes on
                written.add(item.cell)
                ledger.add.remote(unit.index, item.cell)
                summary.written += 1
                if (item.config.ngl or item.config.ngld) and not (item.node and item.node.gpu_offload):
                    summary.no_offload.add(item.host)


def ray_options(address: str, gpus_per_task: float | None, resources: str | None) -> RayOptions:
    """--ray, --ray-gpus-per-task and --ray-resources, checked (Ray itself too: installed or one line saying how)."""
    custom, accelerator = parse_resources(resources)
    options = RayOptions(address, gpus_per_task, custom, accelerator)
    import_ray()
    return options


def on_ray(name: str, grid: Grid, out: Path, choice: PairChoice, options: RayOptions) -> OnRay:
    """`gguf-bench sweep ... --ray ADDRESS`: the pairs named, checked (nothing fetched here: each node fetches its own),
    as units for Ray; run_sweep runs them."""
    sources = pair_sources(choice.names, choice.target, choice.draft, choice.registry)
    return OnRay(name, sources, grid, options, RaySummary(out))


def failure_message(summary: RaySummary, name: str) -> str:
    """One line for the CLI when some units ended in an error."""
    where = f"the records of the others are in {summary.out}; " if summary.written or summary.out.is_file() else ""
    return (f"{len(summary.failures)} of {summary.units} units failed (first: {summary.failures[0]}); {where}"
            f"fix that and continue with `gguf-bench sweep ... --name {name} --resume --ray ...`")


@contextmanager
def _connected(ray: Any, address: str) -> Iterator[None]:
    """Connect to (or, for 'local', start) a Ray cluster unless this process already is; disconnect after."""
    if ray.is_initialized():
        yield
        return
    try:
        ray.init(address=address, logging_level=logging.WARNING,
                 **({"include_dashboard": False} if address == "local" else {}))
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise BenchError(f"cannot connect to a Ray cluster at '{address}' ({_one_line(exc)}); start one with "
                         "`ray start --head` and pass --ray auto (or HEAD:6379), or pass --ray local") from None
    try:
        yield
    finally:
        ray.shutdown()


def _check_feasible(ray: Any, requests: list[dict[str, float]], address: str) -> None:
    """Say so before submitting if no node could ever run a unit (Ray would wait for one forever)."""
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    for request in requests:
        if not any(all(res.get(k, 0) >= v for k, v in request.items()) for res in nodes):
            have = "; ".join(_fmt(_visible(res)) for res in nodes) or "none"
            raise BenchError(f"no node of the Ray cluster at '{address}' has what a unit asks for ({_fmt(request)}); "
                             f"its nodes have: {have}; give nodes those resources (`ray start --num-gpus N "
                             "--resources '{\"KEY\": N}'`) or change --threads, --ray-gpus-per-task or --ray-resources")


def _visible(resources: dict[str, float]) -> dict[str, float]:
    """A node's resources without Ray's bookkeeping ones (memory, object store, node:IP)."""
    hidden = ("memory", "object_store_memory")
    return {k: v for k, v in resources.items() if k not in hidden and not k.startswith("node:")}


def _fmt(resources: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in sorted(resources.items())) or "nothing"


def _start_ledger(ray: Any) -> Any:
    """The ledger actor, pinned to the driver's node so a worker node's death cannot take it."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
    return ray.remote(Ledger).options(num_cpus=0, scheduling_strategy=here, max_restarts=0).remote()


def _one_line(exc: BaseException) -> str:
    """The message of the error a task raised (a BenchError says what to do), else Ray's first line."""
    cause = getattr(exc, "cause", None)  # RayTaskError: the exception the task raised
    text = str(cause) if cause is not None else str(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__

