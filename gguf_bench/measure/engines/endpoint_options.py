"""The endpoint's own options (servers someone else started): which two URLs, how long a request may take."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gguf_bench.measure.engines.declared import EngineOptions, option
from gguf_bench.measure.engines.server_options import TIMEOUT_HELP, check_timeout


@dataclass(frozen=True)
class EndpointOptions(EngineOptions):
    engine: ClassVar[str] = "endpoint"  # endpoint.NAME

    url: str | None = option(None, "--url", help="the OpenAI-compatible server to measure, with speculation "
                             "(http://HOST:PORT)")
    baseline_url: str | None = option(None, "--baseline-url", help="the same model served without speculation, the "
                                      "gain's baseline")
    request_timeout_s: float = option(600.0, "--request-timeout", help=TIMEOUT_HELP)

    def __post_init__(self) -> None:
        check_timeout(self.request_timeout_s)
