"""Every stored record, in one place: its kind, its typed fields, to and from a dict.

llama-bench keeps one field list (`test::get_fields()`) that every printer walks; here the field lists
are these dataclasses. Writers construct records (`RunRecord`, `RunMetrics.from_result`, `EvalRecord`,
`CalibrationRecord`) and store `to_dict(record)`; readers get them back with `parse` (`read_file` for a
whole file, naming each line it cannot read). `run_row` flattens a run into the columns `report` reads.
No other module reads or writes a record field by its name as a string.

Files written by earlier versions still read (legacy.py): a line without `kind` is a run; fields a
record did not have yet take their defaults; fields it no longer has are dropped.
"""

from __future__ import annotations

import functools
import json
import types
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from enum import Enum, StrEnum
from pathlib import Path

from gguf_bench import engine_registry
from gguf_bench.decoding.divergence import Identity
from gguf_bench.decoding.loop import GenerationResult
from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.decoding.strategy import DEFAULT_STRATEGY, Strategy
from gguf_bench.engine_registry import DEFAULT as DEFAULT_ENGINE
from gguf_bench.engine_registry import PYTHON_ENGINE, SERVER_ENGINE  # noqa: F401 (re-exported)
from gguf_bench.engines.placement import Placement
from gguf_bench.errors import BenchError
from gguf_bench.models import reads
from gguf_bench.options import CONTEXT_DEFAULTS
from gguf_bench.results.schema import legacy
from gguf_bench.results.schema.fields import SPEED, Field, flat


class Kind(StrEnum):
    RUN = "run"  # one generation measured: target alone, draft alone or speculative
    EVAL = "eval"  # a multiplication benchmark, regular against speculative
    CALIBRATION = "calibration"  # what `tune` measured to predict tokens/s


class Mode(StrEnum):
    TARGET = "target"  # the target alone: the baseline
    DRAFT = "draft"  # the draft alone
    SPECULATIVE = "speculative"


def gain_pct(tokens_per_s, baseline_tokens_per_s):
    """Speed-up over the baseline in percent (+28 means 1.28x); numbers or pandas columns."""
    return 100.0 * (tokens_per_s / baseline_tokens_per_s - 1.0)


def run_label(mode: Mode | str, strategy_name: str, k: int) -> str:
    """A row's name: 'target alone', 'draft alone', 'K=4' (the draft model with a fixed K), 'ngram(1-4) K=16',
    'draft p-min 0.8 K=16', 'draft heuristic K=4' (K: where the schedule starts). The one place it is made."""
    if mode == Mode.TARGET:
        return "target alone"
    if mode == Mode.DRAFT:
        return "draft alone"
    if not k:  # a server someone else started (the endpoint engine): its draft length is its own, not told to a client
        return "speculative" if strategy_name in ("", "draft") else strategy_name
    return f"K={int(k)}" if strategy_name in ("", "draft") else f"{strategy_name} K={int(k)}"


# --- what every record carries ------------------------------------------------------------------


@dataclass
class Environment:
    """What a measurement depends on besides its configuration (store.environment)."""

    gguf_bench: str | None = None
    llama_cpp_python: str | None = None
    gpu_offload: bool | None = None
    system_info: str | None = None
    python: str | None = None
    platform: str | None = None
    cpu: str | None = None
    cpu_count: int | None = None
    gpu: str | None = None
    gpu_memory: str | None = None
    gpu_count: int | None = None
    devices: list[str] = field(default_factory=list)  # the backends' own device list ('Vulkan0: llvmpipe (...)')


@dataclass
class ModelFile:
    file: str | None = None
    path: str | None = None
    size: int | None = None
    sha256: str | None = None  # one file's; None for a twin and for a split GGUF (part_sha256)
    twin: bool = False  # a twin (models/twin.py): synthetic weights, its figures are speed only, never acceptance
    part_sha256: list[str] | None = None  # a split GGUF: one sha256 per part, in order (size: every part's together)


@dataclass
class Models:
    target: ModelFile | None = None
    draft: ModelFile | None = None  # None: the target alone (n-gram drafting)


@dataclass
class Offload:
    """Layers on the GPU as llama.cpp counts them ('N/total': the output layer is one more layer), and where each
    model's buffers went, both read back from llama.cpp (engines/placement.py); never echoed from the options."""

    target: str = "-"
    draft: str = "-"
    target_placement: Placement | None = None
    draft_placement: Placement | None = None


@dataclass
class Node:
    """Where a distributed sweep ran a cell (measure.distributed.node_info)."""

    host: str | None = None
    hostname: str | None = None
    ip: str | None = None
    ray_node_id: str | None = None
    gpu: str | None = None
    gpu_memory: str | None = None
    gpu_count: int | None = None
    gpu_ids: list[str] = field(default_factory=list)
    cpu: str | None = None
    cpu_count: int | None = None
    llama_cpp_python: str | None = None
    gpu_offload: bool | None = None


@dataclass
class Server:
    """The llama-server process a server-engine run went through (measure/server_engine.py)."""

    command: list[str] = field(default_factory=list)  # its exact command line (the port aside, what to deploy)
    version: str | None = None  # `llama-server --version`'s first line
    build_info: str | None = None  # /props build_info
    speculative: bool | None = None  # /slots: whether it held a draft context
    pool: str | None = None  # a type whose n-gram state outlives a request (ngram-mod, ...): 'cold' (a new process for
    # this run) or 'warm' (the process served the group's earlier requests first); None for the other types


@dataclass
class Endpoint:
    """The server an endpoint-engine run went through (measure/endpoint_engine.py), as it described itself: None (or
    not listed) wherever it did not say; `not_available` names the figures it does not give, which the run left None."""

    url: str = ""
    model: str | None = None  # /v1/models' id
    llama_cpp: bool = False  # it answers llama.cpp's /props (llama-server, ik_llama.cpp): timings, /slots, /metrics
    build_info: str | None = None  # /props build_info
    slots: int | None = None  # /props total_slots
    speculative: bool | None = None  # /slots: whether it holds a draft context
    spec_types: str | None = None  # /slots: the speculative types a request ran with ('draft-simple')
    timed_by: str = ""  # 'server timings' (llama.cpp's predicted_ms) or 'client' (its stream's first and last chunks)
    tokens_from: str = ""  # 'timings', 'usage', or 'length' (it stopped at -n: as many tokens as asked)
    not_available: list[str] = field(default_factory=list)


@dataclass
class Load:
    """The load one run measured under (measure/trackers/load.py): the CPU time the process (every thread) and its
    generating thread got against the run's wall time, the CPU time the rest of the machine used meanwhile, and the
    1-minute load average before and after (stored, not judged: it counts the run's own threads)."""

    load1_before: float | None = None
    load1_after: float | None = None
    wall_s: float | None = None
    cpu_s: float | None = None  # the process: every thread, llama.cpp's included
    main_cpu_s: float | None = None  # the thread that generates (Python, and llama.cpp's worker 0)
    cpu_count: int | None = None
    others_cpu_s: float | None = None  # every other process on the machine (for the server engine: but the server)
    steal_s: float | None = None  # CPU time the hypervisor gave other guests while this VM's cores wanted to run
    # (/proc/stat's steal; inside others_cpu_s too); None: not measured (records before it, not Linux)

    @property
    def load1(self) -> float | None:
        """The higher of the two load averages."""
        known = [x for x in (self.load1_before, self.load1_after) if x is not None]
        return max(known) if known else None

    @property
    def main_share(self) -> float | None:
        """The generating thread's CPU time over wall time: about 1 on a CPU-only run with the machine to itself (it
        runs Python or computes, spinning at llama.cpp's barriers); well below 1 when it had to wait for a core."""
        return self.main_cpu_s / self.wall_s if self.wall_s and self.main_cpu_s is not None else None

    @property
    def others_cores(self) -> float | None:
        """How many cores the rest of the machine kept busy, on average over the run (0.5: half of one core)."""
        return self.others_cpu_s / self.wall_s if self.wall_s and self.others_cpu_s is not None else None

    @property
    def steal_cores(self) -> float | None:
        """How many cores the VM's neighbours took from this machine while it wanted them, on average over the run."""
        return self.steal_s / self.wall_s if self.wall_s and self.steal_s is not None else None


DECODE_WINDOW = "decode"  # Energy.window: the counters read at the first token and after the last (tokens/s's window)
SHARE_WINDOW = "decode share"  # read around the request, times its decode time over the request's (llama-server)
LEGACY_WINDOW = legacy.ENERGY_WINDOW  # records before issue 56: around prompt and decode, from every counter


@dataclass
class Energy:
    """What one run spent, from energy counters read at the two ends of its window (measure/trackers/energy.py): whole
    devices' or packages' counters, so the idle draw and any other process's work in the window are in it. `joules`
    only where the counters read cover every device the run used; else `missing` says what they left out."""

    joules: float | None = None  # over `window`; None unless the counters cover `devices` (never a part of them)
    source: str | None = None  # the counters added into joules: 'rapl:package-0+nvml:GPU0'
    wall_s: float | None = None  # the window's time between its two readings
    counters: list[str] = field(default_factory=list)  # every counter read: 'rapl:package-0', 'nvml:GPU0', ...
    devices: list[str] | None = None  # what the run used: 'CPU', 'CUDA0', 'Vulkan0', 'RPC0[HOST:PORT]' (None: unknown)
    missing: str | None = None  # why joules is None: 'the run used CUDA0 and the CPU; no RAPL (...)'
    window: str = DECODE_WINDOW  # DECODE_WINDOW, SHARE_WINDOW or LEGACY_WINDOW
    prompt_joules: float | None = None  # the prompt's processing, before the decode window (where the engine marks it)

    @property
    def decode_joules(self) -> float | None:
        """The joules over tokens/s's window (None for records before issue 56: another window, partial counters)."""
        return self.joules if self.window != LEGACY_WINDOW else None


@dataclass
class DeviceMemory:
    """One device's memory in use before and after a run, as NVML tells it (measure/trackers/memory.py): every process's,
    and no peak in between; llama.cpp's own buffers per device are the offload's placements (Offload), not repeated."""

    device: str = ""  # 'GPU0: NVIDIA H100 80GB HBM3'
    used_before_mib: float | None = None
    used_after_mib: float | None = None
    total_mib: float | None = None


# --- runs --------------------------------------------------------------------------------------


@dataclass
class RunConfig:
    """One cell's settings. Every field but `category` makes the cell's identity (`cell_fields`, --resume)."""

    ngl: int | str = 0  # target layers on the GPU: a number or 'all'
    ngld: int | str = 0
    n_ctx: int = 2048
    threads: int | None = None
    seed: int = 0
    k: int = 0  # the draft length (where a schedule starts); 0 outside speculative runs
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    n_predict: int = 64
    prompt_id: str | None = None
    chat: bool = False
    repetition: int = 0
    strategy: Strategy | None = None  # None: the draft model with a fixed K (and runs of other modes)
    verify: str | None = None  # None: batched (what is benchmarked)
    category: str | None = None  # the prompt's category (not part of the cell's identity)
    engine: str | None = None  # who generated: None is gguf-bench's Python loop, 'server' llama-server
    # llama.cpp's context settings as the run used them (None: a record from before they were options, which ran with
    # llama.cpp's defaults, options.CONTEXT_DEFAULTS)
    flash_attn: str | None = None  # 'auto', 'on', 'off'
    cache_type_k: str | None = None  # 'f16', 'q8_0', ...
    cache_type_v: str | None = None
    batch_size: int | None = None
    ubatch_size: int | None = None  # what llama.cpp computed at once (never above batch_size)
    threads_draft: int | None = None  # the draft model's threads (None: `threads`)
    # several users at once (server engine): llama-server's slots (-np) and the clients sending at the same moment;
    # None: one request at a time on one slot (every record before them)
    parallel: int | None = None
    clients: int | None = None
    depth: int | None = None  # tokens of context before the prompt (llama-bench's -d); None: none (every older record)
    prompt_length: int | None = None  # --prompt-tokens: the prompt made this many tokens long (timed); None: as written
    # where the weights went beyond -ngl, as the flags asked for it (placing.Placing.label: '-ncmoe 2 -dev none'); what
    # llama.cpp did with it is `offload`'s read-back; None: llama.cpp's default placement (every older record)
    placement: str | None = None
    placement_draft: str | None = None  # the draft's ('-ncmoed 1 -devd none')
    # a setting with --rpc: the one-way delay (ms) of gguf-bench's proxy in front of each RPC server, 0 for none (the
    # placement carries it too, as --rpc-delay, so it is not in the key twice); None: no RPC server
    rpc_delay_ms: int | None = None

    def cell_fields(self) -> dict:
        """What identifies the cell: the stored config without `category`, and without a default strategy, verify
        mode, engine or context setting (so that keys of files written before those existed stay the same)."""
        optional = ("strategy", "verify", "engine", *CONTEXT_DEFAULTS, "threads_draft", "parallel", "clients", "depth",
                    "prompt_length", "placement", "placement_draft")
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in (*optional, "category", "rpc_delay_ms")}
        if self.strategy is not None:
            out["strategy"] = self.strategy.params()
        for name in ("verify", "engine", "parallel", "clients", "depth", "prompt_length", "placement", "placement_draft"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        for name, default in CONTEXT_DEFAULTS.items():
            if getattr(self, name) not in (None, default):
                out[name] = getattr(self, name)
        if self.threads_draft not in (None, self.threads):
            out["threads_draft"] = self.threads_draft
        return out

    @property
    def placement_label(self) -> str:
        """Both models' placement flags ('-ncmoe 2 -devd none'); '' for llama.cpp's default placement."""
        return " ".join(p for p in (self.placement, self.placement_draft) if p)

    def context(self) -> dict:
        """The context settings, llama.cpp's defaults where the record has none."""
        return {name: getattr(self, name) or default for name, default in CONTEXT_DEFAULTS.items()}

    @property
    def engine_name(self) -> str:
        return self.engine or DEFAULT_ENGINE

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(self.temperature, self.top_k, self.top_p, self.seed + self.repetition)


@dataclass
class RunMetrics:
    """What one run measured (a failed run has none)."""

    prompt_tokens: int = 0
    prompt_s: float = 0.0
    n_tokens: int = 0
    decode_s: float = 0.0
    tokens_per_s: float | None = None
    ms_per_token: float | None = None
    end_to_end_s: float | None = None
    # where decode time goes: inside llama_decode (target, draft), sampling and acceptance, the rest
    target_decode_s: float | None = None
    draft_decode_s: float | None = None
    sample_s: float | None = None
    other_s: float | None = None
    overhead_pct: float | None = None
    verify: str | None = None
    stopped_by_eog: bool = False
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    acceptance: float | None = None
    tokens_per_round: float | None = None
    accepted_at: list[int] = field(default_factory=list)  # rounds that accepted draft position i
    reached_at: list[int] = field(default_factory=list)  # rounds that reached draft position i
    text: str | None = None
    strategy: str | None = None  # Strategy.label of a speculative run: 'draft K=4', 'ngram(1-4) K=16'
    draft_lengths: list[int] | None = None  # rounds per draft length (speculative runs)
    draft_sources: dict[str, int] | None = None  # rounds per drafter ("model", "ngram")
    identity: Identity | None = None  # greedy speculative runs: output equal to the target alone's?
    # a speculative run whose drafter proposed no token: the likely reason (measure/proof.py); None where it drafted
    no_drafts: str | None = None
    # --k-schedule cost: the tokens/s its cost model predicted for the rounds it chose, and where its step costs came
    # from ('calibration': tune's, 'warm-up': measured at load); None for other schedules and older records
    predicted_tokens_per_s: float | None = None
    costs_source: str | None = None
    # a round of several clients (server engine, --parallel/--clients): tokens_per_s is the aggregate (every client's
    # tokens over the round's wall time, prompt processing included); these are per request
    requests: list[dict] | None = None  # each request's own figures (server_clients.Request.stored)
    per_request_tokens_per_s: float | None = None  # mean of the requests' decode speeds
    ttft_s: float | None = None  # mean time to first token, client side (queueing and prompt included)
    latency_p50_s: float | None = None  # end-to-end latency, client side
    latency_p95_s: float | None = None

    @classmethod
    def from_result(cls, res: GenerationResult, text: str, identity: Identity | None = None) -> RunMetrics:
        speculative = bool(res.verify)
        return cls(
            prompt_tokens=res.prompt_tokens, prompt_s=res.prompt_s, n_tokens=res.n_tokens, decode_s=res.decode_s,
            tokens_per_s=res.tokens_per_s, ms_per_token=res.ms_per_token, end_to_end_s=res.prompt_s + res.decode_s,
            target_decode_s=res.target_decode_s, draft_decode_s=res.draft_decode_s, sample_s=res.sample_s,
            other_s=res.other_s, overhead_pct=res.overhead_pct, verify=res.verify or None, stopped_by_eog=res.stopped_by_eog,
            rounds=res.rounds, drafted=res.drafted, accepted=res.accepted,
            acceptance=res.acceptance if res.drafted else None,
            tokens_per_round=res.tokens_per_round if res.rounds else None,
            accepted_at=list(res.accepted_at), reached_at=list(res.reached_at), text=text,
            strategy=res.strategy or None if speculative else None,
            draft_lengths=list(res.draft_lengths) if speculative else None,
            draft_sources=dict(res.draft_sources) if speculative else None, identity=identity,
            predicted_tokens_per_s=res.predicted_tokens_per_s, costs_source=res.costs_source or None)


@dataclass
class Order:
    """Where a run stood in its sweep: the verdicts pair a speculative run with the target alone measured next to it."""

    design: str = ""  # 'shuffled': each repetition block's cells in a seeded random order (the Python loop);
    # 'alternate': the setting's llama-server processes held at once, requests in turn (A B A B); 'blocks': one process
    # at a time, in counterbalanced blocks (A B B A ...)
    position: int = 0  # its place in its setting's order (0: measured first)
    seed: int | None = None  # what shuffled the blocks
    started: float | None = None  # Unix time the run began
    looks: int | None = None  # -r auto: how many times the sweep may look at its verdicts (its intervals are corrected
    # for them); None: a fixed -r, one look
    ended: float | None = None  # Unix time the run ended (with `started`: how far apart two paired runs were)
    settings: str | None = None  # how the sweep's settings (offload, placement, context, threads, engine) took turns:
    # 'settings-alternate': loaded side by side, one repetition of each in turn (A B | B A ...); 'settings-chunks': one
    # repetition at a time in that balanced order, the model loaded again at each switch; None: one setting


@dataclass
class RunRecord:
    pair: str = ""
    mode: Mode = Mode.TARGET
    config: RunConfig = field(default_factory=RunConfig)
    metrics: RunMetrics | None = None  # None when the run failed
    error: str | None = None
    offload: Offload | None = None
    sweep: str | None = None
    cell: str | None = None  # key of the grid cell, for --resume
    time: str = ""
    env: Environment = field(default_factory=Environment)
    models: Models = field(default_factory=Models)
    node: Node | None = None  # where a distributed sweep ran it
    load: Load | None = None  # the machine's load over the run (None in files written before runs recorded it)
    server: Server | None = None  # the llama-server process of a server-engine run
    endpoint: Endpoint | None = None  # the server an endpoint-engine run measured
    energy: Energy | None = None  # None: no energy counter was readable (never a zero)
    memory: list[DeviceMemory] | None = None  # None: no device told its memory (NVML)
    order: Order | None = None  # None: a file written before runs were interleaved (their order is not known)
    kind: Kind = Kind.RUN

    def __post_init__(self) -> None:
        self.mode = Mode(self.mode)  # an unknown mode is a ValueError, never a silent speculative run

    @property
    def k(self) -> int:
        return self.config.k if self.mode == Mode.SPECULATIVE else 0

    @property
    def strategy(self) -> Strategy | None:
        """A speculative run's drafting strategy (runs stored before strategies, and default-strategy runs: the
        default); None for the other modes."""
        if self.mode != Mode.SPECULATIVE:
            return None
        return self.config.strategy or DEFAULT_STRATEGY

    @property
    def strategy_name(self) -> str:
        """'draft', 'ngram(1-4)', 'draft p-min 0.8', ...; '' outside speculative runs."""
        return self.strategy.name if self.strategy else ""

    @property
    def label(self) -> str:
        return run_label(self.mode, self.strategy_name, self.k)

    @property
    def host(self) -> str:
        """$GGUF_BENCH_HOST of its Ray node, else the node's hostname; 'local' for a run that did not go through Ray."""
        return str((self.node and (self.node.host or self.node.hostname)) or "local")

    @property
    def greedy(self) -> bool:
        return self.config.sampling().greedy

    @property
    def tokens_per_s(self) -> float | None:
        return self.metrics.tokens_per_s if self.metrics else None


def _m(run: RunRecord) -> RunMetrics:
    return run.metrics or _NO_METRICS


def _metric(name: str) -> Callable[[RunRecord], object]:
    """A RunMetrics attribute of the same name (None for a failed run's default-less figures)."""
    return lambda run: getattr(_m(run), name)


def _measured(get: Callable[[RunRecord], object]) -> Callable[[RunRecord], object]:
    """A figure only a measured run has (None for a failed run)."""
    return lambda run: get(run) if run.metrics else None


def _load(get: Callable[[Load], object]) -> Callable[[RunRecord], object]:
    return lambda run: get(run.load) if run.load else None


def _joules(run: RunRecord) -> float | None:
    """The run's joules over tokens/s's window (Energy.decode_joules), None where not measured."""
    return run.energy.decode_joules if run.energy else None


def _per(joules: float | None, count: int | None) -> float | None:
    """Joules per token, where both are known and the count is not 0."""
    return joules / count if joules is not None and count else None


def decode_steps(run: RunRecord) -> int | None:
    """The target's decode steps over the run's decode (each a verify batch, or one token alone): the Python loop's
    speculative rounds, which it counts; elsewhere the tokens less the accepted drafts less each request's first token
    (it comes from the prompt's evaluation), as llama-server's draft_n_accepted gives them (its /metrics drafts counter
    counts only the steps that drafted). A plain run: one token a step. None where not known."""
    m = run.metrics
    if m is None or not m.n_tokens:
        return None
    if run.mode == Mode.SPECULATIVE and engine_registry.of(run.config.engine_name).counts_rounds:
        return m.rounds or None
    if run.mode == Mode.SPECULATIVE and m.accepted is None:
        return None
    requests = sum(1 for q in m.requests if not q.get("error")) if m.requests else 1
    steps = m.n_tokens - (m.accepted or 0) - requests
    return steps if steps > 0 else None


def _steps_per_s(run: RunRecord) -> float | None:
    """Decode steps per second over tokens/s's window: tokens/s = steps/s x tokens per step."""
    steps, m = decode_steps(run), run.metrics
    return steps / m.decode_s if steps and m.decode_s and m.decode_s > 0 else None


def _tokens_per_step(run: RunRecord) -> float | None:
    """tokens/s over steps/s (so that their product is the run's tokens/s): the tokens of the decode window over its
    steps, the prompt's first token included (tok/rnd leaves it out)."""
    per_s = _steps_per_s(run)
    return run.metrics.tokens_per_s / per_s if per_s and run.metrics.tokens_per_s else None


def bytes_per_token(run: RunRecord, steps: int | None) -> float | None:
    """Bytes the run's decode read per generated token (models/reads.py on the headers; steps: decode_steps). The
    context is the depth, the prompt and half the generated tokens (the mean position a step attends over). A
    speculative step verifies its drafted tokens + 1 and yields tau = (accepted + steps) / steps tokens; a draft model
    drafts them where the strategy names one, in the share of rounds draft_sources gives (a chain with an n-gram
    drafter). None where its model files are not on this machine, it measured nothing, or several requests shared its
    steps (slots batch their steps: one weight read serves them all, which this per-request arithmetic does not count)."""
    m = run.metrics
    if m is None or not m.n_tokens or (m.requests and len(m.requests) > 1):
        return None
    ctk, ctv, models = run.config.cache_type_k, run.config.cache_type_v, run.models
    context = (run.config.depth or 0) + (m.prompt_tokens or 0) + m.n_tokens / 2
    alone = models.draft if run.mode == Mode.DRAFT else models.target
    first = reads.file_bytes(alone.path if alone else None, ctk, ctv)
    if first is None or run.mode != Mode.SPECULATIVE:
        return first.step(context) if first else None
    if not steps or m.accepted is None or m.drafted is None:
        return None
    modelled = models.draft is not None and "draft" in run.strategy_name  # not an n-gram type's row
    draft = reads.file_bytes(models.draft.path, ctk, ctv) if modelled else None
    if modelled and draft is None:
        return None
    rounds = sum((m.draft_sources or {}).values())
    share = (m.draft_sources or {}).get("model", 0) / rounds if rounds else 1.0
    return reads.per_token(reads.speculative_round(target=first, draft=draft, context=context, drafted=m.drafted / steps,
                                                   draft_share=share), (m.accepted + steps) / steps)


def time_to_first_token(run: RunRecord) -> float | None:
    """Seconds from the request to its first token: the client's stopwatch where the engine kept it (llama-server's
    rounds of clients, the endpoint), else the prompt's processing as the engine timed it (the Python loop: the target's
    prompt evaluation and first token plus the drafter's start; llama-server one request at a time: its prompt_ms, the
    draft's prefill in it). None where neither was measured."""
    m = run.metrics
    if m is None:
        return None
    if m.ttft_s is not None:
        return m.ttft_s
    return m.prompt_s if m.prompt_s and m.prompt_s > 0 else None


def request_latency(run: RunRecord) -> float | None:
    """The time from sending a request to its last token for -n tokens: its time to first token plus -n tokens at its
    decode speed (each request's own where several clients shared a round)."""
    ttft, m = time_to_first_token(run), run.metrics
    speed = (m.per_request_tokens_per_s or m.tokens_per_s) if m else None
    if ttft is None or not speed or speed != speed or not run.config.n_predict:
        return None
    return ttft + run.config.n_predict / speed


def _request_tokens_per_s(run: RunRecord) -> float | None:
    """-n tokens over the request's latency (request_latency): higher is better, and its ratio to the target alone's is
    the inverse of the latencies' (the --objective request figure)."""
    latency = request_latency(run)
    return run.config.n_predict / latency if latency else None


def _served_tokens_per_s(run: RunRecord) -> float | None:
    """Every token the server gave over the wall time, prompts included (the --objective throughput figure): a round of
    clients' own tokens/s (its tokens over its wall time); one request: its tokens over its first token's wait and its
    decode."""
    m, ttft = run.metrics, time_to_first_token(run)
    if m is None or not m.n_tokens:
        return None
    if m.requests:
        return m.tokens_per_s
    return m.n_tokens / (ttft + m.decode_s) if ttft is not None and m.decode_s and m.decode_s > 0 else None


def _per_joule(run: RunRecord) -> float | None:
    """Tokens per joule: None wherever joules per token is (no energy, no tokens), and for a zero reading."""
    joules, count = _joules(run), _m(run).n_tokens if run.metrics else None
    return count / joules if joules and count else None


def _energy_source(run: RunRecord) -> str | None:
    """The counters a run's joules came from, and how its window was taken where it is not read at the decode's ends."""
    if _joules(run) is None:
        return None
    share = " (llama-server: the request's joules times its decode time's share)" * (run.energy.window == SHARE_WINDOW)
    return f"{run.energy.source}{share}"


def _used_after(run: RunRecord) -> float | None:
    """The memory in use after the run on the fullest device it has a reading of (one device's: never a sum)."""
    known = [m.used_after_mib for m in run.memory or [] if m.used_after_mib is not None]
    return max(known) if known else None


def run_placements(run: RunRecord) -> list[Placement]:
    """Where the models the run ran went (the offload's read-back): the target's, the draft's, or both."""
    if not run.offload:
        return []
    models = {Mode.TARGET: [run.offload.target_placement], Mode.DRAFT: [run.offload.draft_placement]}.get(
        run.mode, [run.offload.target_placement, run.offload.draft_placement])
    return [p for p in models if p is not None]


def _device_buffers(run: RunRecord) -> float | None:
    """llama.cpp's device buffers (MiB) of the models the run used, from the offload's read-back; None where none went
    to a device (never a zero)."""
    return sum(sum(p.device_mib().values()) for p in run_placements(run)) or None


_NO_METRICS = RunMetrics()

# Every flat column of a run, declared once: records.run_row walks them, report.summarize folds the ones with a fold
# (in this order: the summary's columns), and the run table shows the ones with a header (by `place`).
RUN_FIELDS: tuple[Field, ...] = (
    # the setting and the run: keys, not folded
    Field("sweep", lambda r: r.sweep), Field("time", lambda r: r.time), Field("pair", lambda r: r.pair),
    Field("engine", lambda r: r.config.engine_name), Field("mode", lambda r: str(r.mode)), Field("k", lambda r: r.k),
    Field("strategy", lambda r: r.strategy_name), Field("ngl", lambda r: str(r.config.ngl)),
    Field("ngld", lambda r: str(r.config.ngld)), Field("temperature", lambda r: r.config.temperature),
    Field("greedy", lambda r: r.greedy), Field("n_predict", lambda r: r.config.n_predict),
    Field("prompt_id", lambda r: r.config.prompt_id), Field("repetition", lambda r: r.config.repetition),
    Field("threads", lambda r: r.config.threads), Field("n_ctx", lambda r: r.config.n_ctx),
    Field("verify", lambda r: r.config.verify), Field("top_k", lambda r: r.config.top_k),
    Field("top_p", lambda r: r.config.top_p),
    *(Field(name, functools.partial(lambda name, r: r.config.context()[name], name)) for name in CONTEXT_DEFAULTS),
    Field("threads_draft", lambda r: r.config.threads_draft or r.config.threads or r.env.cpu_count or 0),
    Field("parallel", lambda r: r.config.parallel), Field("clients", lambda r: r.config.clients),
    Field("depth", lambda r: r.config.depth or 0), Field("prompt_length", lambda r: r.config.prompt_length or 0),
    Field("placement", lambda r: r.config.placement_label),
    Field("host", lambda r: r.host),
    # what a setting's runs measured, folded into its summary row
    Field("tokens_per_s", _metric("tokens_per_s"), "tokens/s", "mean", spread=True),
    Field("ms_per_token", _metric("ms_per_token"), "ms", "mean", header="ms/tok", place=80),
    Field("pp_tokens_per_s", lambda r: r.metrics.prompt_tokens / r.metrics.prompt_s if r.metrics and r.metrics.prompt_s > 0
          else None, "tokens/s", "mean", numeric=True, header="pp t/s", fmt=SPEED, place=50),
    Field("acceptance", _metric("acceptance"), "", "mean", header="accept", md="acceptance", fmt="{:.1%}", place=90),
    Field("tokens_per_round", _metric("tokens_per_round"), "tokens", "mean", header="tok/rnd", place=100),
    Field("overhead_pct", _metric("overhead_pct"), "%", "mean", header="ovh", fmt="{:.1f}%", place=120),
    Field("target_offload", lambda r: (r.offload or Offload(None, None)).target, "", "first"),
    Field("draft_offload", lambda r: (r.offload or Offload(None, None)).draft, "", "first"),
    Field("target_file", lambda r: r.models.target.file if r.models.target else None, "", "first"),
    Field("draft_file", lambda r: r.models.draft.file if r.models.draft else None, "", "first"),
    Field("cpu", lambda r: r.env.cpu, "", "first"), Field("gpu", lambda r: r.env.gpu, "", "first"),
    Field("load1", _load(lambda lo: lo.load1), "", "max", numeric=True),
    Field("main_cpu_share", _load(lambda lo: lo.main_share), "", "min", numeric=True),
    Field("cpu_count", lambda r: (r.load.cpu_count if r.load else None) or r.env.cpu_count, "cores", "max", numeric=True),
    Field("others_cores", _load(lambda lo: lo.others_cores), "cores", "max", numeric=True),
    Field("steal_cores", _load(lambda lo: lo.steal_cores), "cores", "max", numeric=True, optional=True),
    Field("per_request_tokens_per_s", _metric("per_request_tokens_per_s"), "tokens/s", "mean", header="req t/s",
          shown_with="parallel", fmt=SPEED, place=60),
    Field("ttft_s", time_to_first_token, "s", "mean", numeric=True),  # every run of every engine (time_to_first_token)
    Field("prompt_tokens", _measured(lambda r: r.metrics.prompt_tokens), "tokens", "mean", numeric=True),
    # the figures of the other objectives (summary.OBJECTIVES), higher is better: -n tokens over the request's latency,
    # and every token over the wall time, prompts included
    Field("request_latency_s", request_latency, "s", "mean", numeric=True),
    Field("request_tokens_per_s", _request_tokens_per_s, "tokens/s", "mean", numeric=True),
    Field("served_tokens_per_s", _served_tokens_per_s, "tokens/s", "mean", numeric=True),
    Field("latency_p95_s", _metric("latency_p95_s"), "s", "mean", header="p95 s", shown_with="parallel", place=70),
    Field("schedule_predicted_tokens_per_s", _metric("predicted_tokens_per_s"), "tokens/s", "mean", numeric=True),
    # speed as two factors (tokens/s = steps/s x tokens per step), and the bytes a token's decode reads (--format json)
    Field("steps_per_s", _steps_per_s, "steps/s", "mean", numeric=True, optional=True),
    Field("tokens_per_step", _tokens_per_step, "tokens", "mean", numeric=True, optional=True),
    Field("bytes_per_token", lambda r: bytes_per_token(r, decode_steps(r)), "bytes", "mean", numeric=True,
          optional=True),  # from the GGUF headers, where the files are here (results/predictions/ceiling.py's numerator)
    # what the trackers measured beyond load (measure/trackers/): columns only where some run has them
    Field("energy_j", _joules, "J", "mean", numeric=True, optional=True),
    Field("joules_per_token", lambda r: _per(_joules(r), r.metrics.n_tokens if r.metrics else None), "J/token", "mean",
          numeric=True, optional=True, header="J/tok", fmt="{:.3g}", place=112, legend_from="energy_source",
          legend="J/tok: joules per generated token over the decode (tokens/s's window), J/acc: per accepted draft token, "
                 "from {} (whole devices: idle draw included; every device the run used, or no figure); energy: tokens "
                 "per joule over the target alone's"),
    Field("joules_per_accepted", lambda r: _per(_joules(r), r.metrics.accepted if r.metrics else None), "J/token",
          "mean", numeric=True, optional=True, header="J/acc", fmt="{:.3g}", place=113),
    Field("tokens_per_joule", _per_joule, "tokens/J", "mean", numeric=True, optional=True, gain="energy", place=111),
    Field("prompt_energy_j", lambda r: r.energy.prompt_joules if r.energy else None, "J", "mean", numeric=True,
          optional=True),  # the prompt's processing, apart (Python engine)
    Field("energy_source", _energy_source, "", "first", optional=True),
    Field("buffers_mib", _device_buffers, "MiB", "max", numeric=True, optional=True, header="dev MiB", fmt="{:.0f}",
          place=125, legend="dev MiB: llama.cpp's buffers on devices (weights, KV, compute) of the models the row ran"),
    Field("device_used_after_mib", _used_after, "MiB", "max", numeric=True, optional=True, header="used MiB",
          fmt="{:.0f}", place=126, legend="used MiB: memory in use after the run on the fullest GPU it used, as NVML "
                                          "tells it (one device's, every process's: not a peak)"),
    # per run only
    Field("n_tokens", _measured(lambda r: r.metrics.n_tokens), "tokens"),
    Field("accepted_at", _measured(lambda r: r.metrics.accepted_at)),
    Field("reached_at", _measured(lambda r: r.metrics.reached_at)),
    Field("draft_lengths", _metric("draft_lengths")), Field("category", lambda r: r.config.category),
    Field("identical", lambda r: _m(r).identity.identical if _m(r).identity else None),
    Field("differs_at", lambda r: _m(r).identity.position if _m(r).identity else None),  # where it parts from the
    # target alone's text
    Field("error", lambda r: r.error), Field("text", _metric("text")),
    Field("drafted", lambda r: r.metrics.drafted if r.metrics and r.metrics.n_tokens else None),  # (no tokens: no proof)
    Field("no_drafts", _metric("no_drafts")),
    Field("twin", lambda r: any(f is not None and f.twin for f in (r.models.target, r.models.draft))),  # speed only
    Field("cpu_share", _load(lambda lo: lo.cpu_s / lo.wall_s if lo.wall_s and lo.cpu_s is not None else None)),
    Field("pool", lambda r: r.server.pool if r.server else None),
    Field("design", lambda r: r.order.design if r.order else None),  # how the runs were ordered (Order)
    Field("position", lambda r: r.order.position if r.order else None),
    Field("started", lambda r: r.order.started if r.order else None),
    Field("looks", lambda r: r.order.looks if r.order else None),
    Field("ended", lambda r: r.order.ended if r.order else None),
    Field("settings_design", lambda r: r.order.settings if r.order else None),  # Order.settings
    Field("command", lambda r: " ".join(r.server.command) if r.server and r.server.command else None),
)


def run_row(run: RunRecord) -> dict:
    """One flat row per run: every column `report` reads (RUN_FIELDS)."""
    return flat(run, RUN_FIELDS)


# --- evaluations --------------------------------------------------------------------------------


@dataclass
class EvalConfig:
    nb_prompts: int = 0
    seed: int = 0
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    k: int = 0
    ngl: int | str = 0
    ngld: int | str = 0
    n_predict: int = 12
    chat: bool = False
    verify: str = "batched"

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(self.temperature, self.top_k, self.top_p, self.seed)


@dataclass
class EvalMetrics:
    n: int = 0
    regular_ok: int = 0
    speculative_ok: int = 0
    identical: int = 0
    batch_numerics: int = 0  # greedy differences the replay shows are batch numerics (decoding/divergence.py)
    loop_errors: int = 0  # greedy differences the replay does not explain: the loop is wrong
    p_value: float | None = None
    acceptance: float | None = None


@dataclass
class EvalRow:
    """One multiplication prompt, answered both ways."""

    a: int = 0
    b: int = 0
    answer: int = 0
    regular: str = ""
    speculative: str = ""
    regular_ok: bool = False
    speculative_ok: bool = False
    identical: bool = False
    divergence: Identity | None = None  # greedy rows whose outputs differ: where and why


@dataclass
class EvalRecord:
    pair: str = ""
    config: EvalConfig = field(default_factory=EvalConfig)
    metrics: EvalMetrics = field(default_factory=EvalMetrics)
    rows: list[EvalRow] = field(default_factory=list)
    time: str = ""
    env: Environment = field(default_factory=Environment)
    models: Models = field(default_factory=Models)
    kind: Kind = Kind.EVAL

    @property
    def greedy(self) -> bool:
        return self.config.sampling().greedy


# --- calibrations (tune) ---------------------------------------------------------------------------


@dataclass
class CalibrationConfig:
    ngl: int | str = 0
    ngld: int | str = 0
    n_ctx: int = 2048
    threads: int | None = None
    seed: int = 0
    temperature: float = 0.0
    prompts: list[str] = field(default_factory=list)
    n_predict: int = 0
    ks: list[int] = field(default_factory=list)
    k_max: int = 0
    reps: int = 0  # decode timing samples per batch size
    position: int = 0  # context position the decode timings were taken at (after the depth's filler)
    depth: int = 0  # tokens of filler before every prompt (measure/depth.py)
    placement: str | None = None  # both models' placement flags beyond -ngl (RunConfig.placement_label); None: default


@dataclass
class InLoop:
    """What the calibration's own K_max runs measured (a check of the timings' prediction)."""

    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    decode_s: float = 0.0
    target_decode_s: float = 0.0
    draft_decode_s: float = 0.0
    sample_s: float = 0.0
    other_s: float = 0.0
    overhead_s_per_round: float | None = None
    draft_decode_s_per_token: float | None = None
    target_decode_s_per_round: float | None = None
    tokens_per_s: list[float] = field(default_factory=list)
    predicted_decode_s: float | None = None


@dataclass
class CalibrationTimings:
    t_draft_s: float = 0.0
    t_draft2_s: float = 0.0
    t_verify_s: list[float] = field(default_factory=list)  # t_verify(b) for b = 1..k_max+1
    round_overhead_s: float = 0.0
    round_overhead_raw_s: float | None = None
    regular_overhead_s: float | None = None
    draft_python_s: float | None = None
    verify_python_s: list[float] = field(default_factory=list)
    in_loop: InLoop = field(default_factory=InLoop)
    # per calibration prompt (acceptance.prompts' order): the target's and the draft's evaluation of it, median of a
    # few (the request-latency prediction's first-token term); empty in records before it
    prompt_target_s: list[float] = field(default_factory=list)
    prompt_draft_s: list[float] = field(default_factory=list)


@dataclass
class PromptText:
    """One calibration prompt's greedy text (measure.calibrate.Text, stored)."""

    prompt_id: str = ""
    n_tokens: int = 0
    stopped_by_eog: bool = False
    matches: list[int] = field(default_factory=list)
    prompt: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)


@dataclass
class CalibrationAcceptance:
    a: list[float | None] = field(default_factory=list)  # acceptance of draft position j once reached
    reached_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)
    prompts: list[PromptText] = field(default_factory=list)


@dataclass
class CalibrationRecord:
    pair: str = ""
    config: CalibrationConfig = field(default_factory=CalibrationConfig)
    offload: Offload | None = None
    timings: CalibrationTimings = field(default_factory=CalibrationTimings)
    acceptance: CalibrationAcceptance = field(default_factory=CalibrationAcceptance)
    tune: str | None = None  # the tune's results name
    calibration_s: float | None = None
    time: str = ""
    env: Environment = field(default_factory=Environment)
    models: Models = field(default_factory=Models)
    kind: Kind = Kind.CALIBRATION


@dataclass
class OtherRecord:
    """A kind this version does not know (one of a later version): kept as it is, never tabulated."""

    kind: str
    data: dict


Record = RunRecord | EvalRecord | CalibrationRecord | OtherRecord
CLASSES = {Kind.RUN: RunRecord, Kind.EVAL: EvalRecord, Kind.CALIBRATION: CalibrationRecord}


# --- to and from dicts ----------------------------------------------------------------------------


def to_dict(record: RunRecord | EvalRecord | CalibrationRecord) -> dict:
    """The stored form: nested dicts of the fields (enums are str: JSON writes their values)."""
    return asdict(record)


def parse(d: dict) -> Record:
    """A stored dict as its record. Unknown keys are dropped (kept whole in an OtherRecord); missing ones default.
    A value that cannot be the field's type (a mode that does not exist, a strategy no longer valid) is a ValueError."""
    if not isinstance(d, dict):
        raise ValueError("a record is a JSON object")
    kind = d.get("kind", Kind.RUN)
    cls = CLASSES.get(kind)
    if cls is None:
        return OtherRecord(str(kind), d)
    try:
        return _build(cls, legacy.upgrade(str(kind), d))
    except BenchError as exc:  # a dataclass's own validation (Strategy, SamplingConfig)
        raise ValueError(str(exc)) from None


def read_file(path: Path) -> tuple[list[Record], list[str]]:
    """The records of one JSONL file, and 'FILE line N' for each line that is not one."""
    good, bad = [], []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                good.append(parse(json.loads(line)))
            except (ValueError, TypeError):
                bad.append(f"{path} line {n}")
    return good, bad


@functools.cache
def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls)


def _build(cls: type, d: dict):
    if not isinstance(d, dict):
        raise TypeError(f"{cls.__name__} is stored as an object, not {type(d).__name__}")
    hints = _hints(cls)
    return cls(**{f.name: _value(hints[f.name], d[f.name]) for f in fields(cls) if f.name in d})


def _value(tp, v):
    """A stored value as the field's type: nested dataclasses and lists of them are built, enums looked up."""
    if v is None:
        return None
    options = typing.get_args(tp) if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union else (tp,)
    for t in options:
        if is_dataclass(t) and isinstance(v, dict):
            return _build(t, v)
        if isinstance(t, type) and issubclass(t, Enum):
            return t(v)
        if typing.get_origin(t) is list and isinstance(v, list):
            (item,) = typing.get_args(t) or (None,)
            return [_value(item, x) for x in v] if item is not None else v
    return v
