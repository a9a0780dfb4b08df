"""The endpoint's own options (servers someone else started): which two URLs, how long a request may take."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gguf_bench.measure.engines.declared import EngineOptions, option, them
from gguf_bench.measure.engines.server_options import TIMEOUT_HELP, check_timeout


@dataclass(frozen=True)
class EndpointOptions(EngineOptions):
    engine: ClassVar[str] = "endpoint"  # endpoint.NAME
    # the sweep's axes a client can set (the CLI's parameter names), besides these options: every other one (-K, -ngl,
    # --spec-type, -fa, ...) is the server owner's, set when it was started: given here, it is refused in one line
    takes: ClassVar[frozenset[str] | None] = frozenset({
        "temps", "prompt_ids", "prompts_file", "per_category", "registry", "top_k", "top_p", "seed", "n_predict",
        "repetitions", "max_reps", "reps_budget", "clients", "parallels", "depths", "prompt_tokens"})

    url: str | None = option(None, "--url", help="the OpenAI-compatible server to measure, with speculation "
                             "(http://HOST:PORT)")
    baseline_url: str | None = option(None, "--baseline-url", help="the same model served without speculation, the "
                                      "gain's baseline")
    request_timeout_s: float = option(600.0, "--request-timeout", help=TIMEOUT_HELP)

    def __post_init__(self) -> None:
        check_timeout(self.request_timeout_s)

    @classmethod
    def refusal(cls, flags: list[str]) -> str:
        return (f"{', '.join(flags)}: set by the server's owner when it was started, not by a client; --engine "
                f"{cls.engine} measures the servers as they run: leave {them(flags)} out")
