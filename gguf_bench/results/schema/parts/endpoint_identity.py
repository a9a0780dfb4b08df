"""The server an endpoint-engine run measured, as it described itself (measure/engines/endpoint.py fills it)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Endpoint:
    """The server an endpoint-engine run went through (measure/engines/endpoint.py), as it described itself: None (or
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
