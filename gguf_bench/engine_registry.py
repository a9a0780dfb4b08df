"""Every engine, declared once: its name, what it can do, how tables name it, the class a sweep opens and the
calibration `tune` runs for it. The option parser, the plan, the sweep, tune and the report read this table, and no
other module compares an engine's name: they ask its capabilities. Adding an engine is its module (and its options'
class, where it owns any) and one line in KINDS.

The classes and calibrations are named by path ('module:attribute') and imported when first used, as plugin tables
do (optimum-benchmark's `_target_`): the table sits below every layer that reads it, the engines above all of them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields

from gguf_bench.errors import ConfigError


@dataclass(frozen=True)
class Capabilities:
    """An engine's abilities. `what` names it in messages ('the Python loop')."""

    what: str
    concurrent: bool = False  # several slots and clients at once (--parallel, --clients)
    draft_alone: bool = False  # measures the draft model alone (a row of its own)
    loop_types: bool = False  # gguf-bench's own drafting: K schedules, the n-gram-then-draft chain
    server_types: bool = False  # llama-server's own --spec-type values (ngram-mod, draft-mtp, ...)
    rpc_checked_here: bool = False  # its --rpc servers are checked by this process (else by the engine's binary)
    ray: bool = False  # runs as a Ray unit on another node (--ray)
    server_process: bool = False  # runs a server whose command line is what to deploy
    replays: bool = False  # a greedy text that parts from the target alone's is replayed to say why (else only where)
    remote: bool = False  # measures servers someone else started (--url against --baseline-url): no files, no deploy line
    counts_rounds: bool = False  # its records' `rounds` are every verify step of a speculative run (the loop's own count)

    def check_strategy(self, s) -> None:
        """One line for a drafting strategy (decoding.strategy.Strategy) this engine cannot run."""
        if s.server_only and not self.server_types:
            raise ConfigError(f"--spec-type {s.spec_type} is llama-server's own: run it with --engine "
                              f"{' or '.join(names_with('server_types'))}")
        if not self.loop_types:
            s.check_server()


@dataclass(frozen=True)
class EngineKind:
    """One engine's declaration."""

    name: str  # --engine NAME, and what its records store
    capabilities: Capabilities
    title: str  # its name in titles ('llama-server')
    short: str  # its name in narrow columns ('srv')
    engine: str  # 'module:Class' of its engine (measure/engines/protocol.Engine): what a sweep opens a setting with
    tune: str | None = None  # 'module:function' of its `tune` calibration; None: tune cannot calibrate it
    in_both: bool = False  # one of `--engine both`, in this table's order
    options: str | None = None  # 'module:Class' of its options (measure/engines/declared.EngineOptions); None: none

    def engine_class(self) -> type:
        return _load(self.engine)

    def options_class(self) -> type | None:
        """The dataclass of the options this engine owns (its flags, defaults, checks), or None."""
        return _load(self.options) if self.options else None

    def tune_flow(self):
        """The `tune` command's flow for this engine: one line where it has none."""
        if self.tune is None:
            raise ConfigError(f"tune cannot calibrate {self.capabilities.what}; calibrate with --engine "
                              f"{' or '.join(k.name for k in ENGINES.values() if k.tune)}")
        return _load(self.tune)


PYTHON_ENGINE, SERVER_ENGINE = "python", "server"  # gguf-bench's own loop; llama.cpp's llama-server
DEFAULT = PYTHON_ENGINE  # what a record without an engine ran (records before engines), and --engine's default

KINDS: tuple[EngineKind, ...] = (
    EngineKind(PYTHON_ENGINE, Capabilities("the Python loop", draft_alone=True, loop_types=True, rpc_checked_here=True,
                                           ray=True, replays=True, counts_rounds=True), "python loop", "py",
               "gguf_bench.measure.engines.python:PythonEngine", "gguf_bench.cli.tune:tune_python", in_both=True,
               options="gguf_bench.measure.engines.python_options:PythonOptions"),
    EngineKind(SERVER_ENGINE, Capabilities("llama-server", concurrent=True, server_types=True, server_process=True),
               "llama-server", "srv", "gguf_bench.measure.engines.server:ServerEngine", "gguf_bench.cli.tune:tune_server",
               in_both=True, options="gguf_bench.measure.engines.server_options:ServerOptions"),
    EngineKind("endpoint", Capabilities("a server at --url", concurrent=True, remote=True), "endpoint", "ep",
               "gguf_bench.measure.engines.endpoint:EndpointEngine",
               options="gguf_bench.measure.engines.endpoint_options:EndpointOptions"),
)
ENGINES: dict[str, EngineKind] = {k.name: k for k in KINDS}


def kind(name: str | None) -> EngineKind:
    """An engine's declaration by its name (None: DEFAULT, as records store it); one line for an unknown name."""
    name = name or DEFAULT
    if name not in ENGINES:
        raise ConfigError(f"unknown --engine '{name}'; choose from {', '.join(ENGINES)}")
    return ENGINES[name]


def of(name: str | None) -> Capabilities:
    """An engine's capabilities by its name (None: the Python loop, as records store it)."""
    return kind(name).capabilities


def chosen(text: str) -> tuple[str, ...]:
    """--engine: one engine's name, or both (the engines declared in_both, in this table's order)."""
    word = str(text).strip().lower()
    if word == "both":
        return tuple(k.name for k in ENGINES.values() if k.in_both)
    if word not in ENGINES:
        raise ConfigError(f"unknown --engine '{text}'; choose from {', '.join(ENGINES)} or both")
    return (word,)


def names_with(capability: str) -> list[str]:
    """The engines that have a capability (a Capabilities field that is true)."""
    if capability not in {f.name for f in fields(Capabilities)}:
        raise ValueError(f"no capability {capability!r}")
    return [k.name for k in ENGINES.values() if getattr(k.capabilities, capability)]


def stored(name: str) -> str | None:
    """How a record stores who generated: None for DEFAULT (as records before engines), else the name."""
    return None if is_default(kind(name).name) else name


def is_default(name: str | None) -> bool:
    """Whether a record's engine is DEFAULT (None is: records before engines)."""
    return (name or DEFAULT) == DEFAULT


def title(name: str | None) -> str:
    """The engine's name in titles; a name this table does not know (a newer file's) as it is."""
    return ENGINES[name or DEFAULT].title if (name or DEFAULT) in ENGINES else str(name)


def short(name: str | None) -> str:
    """The engine's name in narrow columns; an unknown one as it is."""
    return ENGINES[name or DEFAULT].short if (name or DEFAULT) in ENGINES else str(name)


def _load(path: str):
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)
