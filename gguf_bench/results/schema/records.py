"""Every stored record's kind and the run record itself: its setting, its measurement, its parts; to and from a dict.

llama-bench keeps one field list (`test::get_fields()`) that every printer walks; here the field lists
are dataclasses: the run's own here, each part's beside its columns (parts/: `RUN_PARTS`), the evaluation's and the
calibration's in their modules. Writers construct records (`RunRecord`, `RunMetrics.from_result`, `EvalRecord`,
`CalibrationRecord`) and store `to_dict(record)`; readers get them back with `parse` (`read_file` for a
whole file, naming each line it cannot read). `run_fields.run_row` flattens a run into the columns `report` reads.
No other module reads or writes a record field by its name as a string.

Files written by earlier versions still read (legacy.py): a line without `kind` is a run; fields a
record did not have yet take their defaults; fields it no longer has are dropped.
"""

from __future__ import annotations

import functools
import json
import types
import typing
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from enum import Enum
from pathlib import Path

from gguf_bench import axes
from gguf_bench.decoding.divergence import Identity
from gguf_bench.decoding.loop import GenerationResult
from gguf_bench.decoding.sampling import SamplingConfig
from gguf_bench.decoding.strategy import DEFAULT_STRATEGY, Strategy
from gguf_bench.engine_registry import DEFAULT as DEFAULT_ENGINE
from gguf_bench.engine_registry import PYTHON_ENGINE, SERVER_ENGINE  # noqa: F401 (re-exported)
from gguf_bench.errors import BenchError
from gguf_bench.results.schema import legacy
from gguf_bench.results.schema.calibration import CalibrationRecord
from gguf_bench.results.schema.evaluation import EvalRecord
from gguf_bench.results.schema.kinds import Kind, Mode, run_label
from gguf_bench.results.schema.parts.endpoint_identity import Endpoint
from gguf_bench.results.schema.parts.energy_spent import Energy
from gguf_bench.results.schema.parts.machine_load import Load
from gguf_bench.results.schema.parts.memory import DeviceMemory
from gguf_bench.results.schema.parts.node import Node
from gguf_bench.results.schema.parts.offload import Offload
from gguf_bench.results.schema.parts.order import Order
from gguf_bench.results.schema.parts.provenance import Build, Environment, Models
from gguf_bench.results.schema.parts.server_process import Server

# --- runs --------------------------------------------------------------------------------------


@dataclass
class RunConfig(axes.fields_of("RunAxes")):
    """One cell's settings. Every field but `category` makes the cell's identity (`cell_fields`, --resume). Beside
    these, a field per declared axis (gguf_bench/axes.py: llama.cpp's context settings as the run used them; None: a
    record from before it was an option, which ran with llama.cpp's default, axes.CONTEXT_DEFAULTS)."""

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
    # the llama-server (or unified `llama`) binary, as --server-bin gave it, where a sweep lists several (A,B: a setting
    # like -ngl); None: the sweep's one binary, the Python loop, every older record (the `build` part says what ran)
    server_bin: str | None = None
    # the Python loop's libllama folder, as --lib gave it (each build run in a process of its own); None: llama-cpp-python's
    # own library, every older record (the `build` part says what ran)
    lib: str | None = None

    def cell_fields(self) -> dict:
        """What identifies the cell: the stored config without `category`, and without a default strategy, verify
        mode, engine or context setting (so that keys of files written before those existed stay the same)."""
        optional = ("strategy", "verify", "engine", *axes.AXIS, "parallel", "clients", "depth",
                    "prompt_length", "placement", "placement_draft", "server_bin", "lib")
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in (*optional, "category", "rpc_delay_ms")}
        if self.strategy is not None:
            out["strategy"] = self.strategy.params()
        for name in ("verify", "engine", "parallel", "clients", "depth", "prompt_length", "placement", "placement_draft",
                     "server_bin", "lib"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        for a in axes.AXES:  # an axis only where it is not what llama.cpp runs where none is given
            if getattr(self, a.name) not in (None, a.usual(self.get)):
                out[a.name] = getattr(self, a.name)
        return out

    def get(self, name: str) -> object:
        """A field by its name (what axes.Axis reads a setting by)."""
        return getattr(self, name)

    @property
    def placement_label(self) -> str:
        """Both models' placement flags ('-ncmoe 2 -devd none'); '' for llama.cpp's default placement."""
        return " ".join(p for p in (self.placement, self.placement_draft) if p)

    def context(self) -> dict:
        """The context settings, llama.cpp's defaults where the record has none."""
        return {name: getattr(self, name) or default for name, default in axes.CONTEXT_DEFAULTS.items()}

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
    requests: list[dict] | None = None  # each request's own figures (streamed.StreamedRequest.stored)
    per_request_tokens_per_s: float | None = None  # mean of the requests' decode speeds
    ttft_s: float | None = None  # mean time to first token, client side (queueing and prompt included)
    # the bytes its decode read a generated token, from the GGUF headers where it ran (run_fields.bytes_per_token: the
    # ceiling's numerator); None: not known there (older records: the report computes it where the files are)
    bytes_per_token: float | None = None
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
    build: Build | None = None  # the llama.cpp build it went through (None: a file written before runs named it)
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
