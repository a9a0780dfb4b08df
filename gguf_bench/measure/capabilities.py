"""What each engine can do, declared once: the plan, the sweep, the CLI and the report ask these instead of branching
on engine names. An engine module's class carries its declaration (`capabilities`); `ENGINES` below is the name map
they are looked up by (measure/engine.py maps the same names to the classes).
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf_bench.decoding.strategy import Strategy
from gguf_bench.errors import ConfigError
from gguf_bench.options import PYTHON_ENGINE, SERVER_ENGINE


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

    def check_strategy(self, s: Strategy) -> None:
        """One line for a drafting strategy this engine cannot run."""
        if s.server_only and not self.server_types:
            raise ConfigError(f"--spec-type {s.spec_type} is llama-server's own: run it with --engine server")
        if not self.loop_types:
            s.check_server()


ENGINES: dict[str, Capabilities] = {
    PYTHON_ENGINE: Capabilities("the Python loop", draft_alone=True,
                                loop_types=True, rpc_checked_here=True, ray=True),
    SERVER_ENGINE: Capabilities("llama-server", concurrent=True, server_types=True, server_process=True),
}


def of(engine: str | None) -> Capabilities:
    """An engine's capabilities by its name (None: the Python loop, as records store it)."""
    name = engine or PYTHON_ENGINE
    if name not in ENGINES:
        raise ConfigError(f"unknown --engine '{name}'; choose from {', '.join(ENGINES)} or both")
    return ENGINES[name]
