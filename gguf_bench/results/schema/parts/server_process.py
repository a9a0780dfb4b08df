"""The llama-server process a server-engine run went through (measure/engines/server.py fills it); its columns."""

from __future__ import annotations

from dataclasses import dataclass, field

from gguf_bench.results.schema.fields import Field


@dataclass
class Server:
    """The llama-server process a server-engine run went through (measure/engines/server.py)."""

    command: list[str] = field(default_factory=list)  # its exact command line (the port aside, what to deploy)
    version: str | None = None  # `llama-server --version`'s first line
    build_info: str | None = None  # /props build_info
    speculative: bool | None = None  # /slots: whether it held a draft context
    pool: str | None = None  # a type whose n-gram state outlives a request (ngram-mod, ...): 'cold' (a new process for
    # this run) or 'warm' (the process served the group's earlier requests first); None for the other types




FIELDS = (
    Field("pool", lambda r: r.server.pool if r.server else None),
    Field("command", lambda r: " ".join(r.server.command) if r.server and r.server.command else None),
)
