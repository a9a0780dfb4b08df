"""llama-server's own options (the server engine): which binary, how long a request may take, whether n-gram types
whose state outlives a request share one process."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from gguf_bench.engine_registry import SERVER_ENGINE
from gguf_bench.errors import ConfigError
from gguf_bench.measure.engines.declared import EngineOptions, option

TIMEOUT_HELP = "seconds one request of a concurrent round may take before its client disconnects"


@dataclass(frozen=True)
class ServerOptions(EngineOptions):
    engine: ClassVar[str] = SERVER_ENGINE

    server_bin: Path | None = option(None, "--server-bin", help="the llama-server to run, or llama.cpp's unified "
                                     "`llama` (run as `llama serve`) (default: llama-server on PATH, else `llama` on PATH, "
                                     "else the one `gguf-bench build-server` made)", commands=("run", "sweep", "tune"))
    request_timeout_s: float = option(600.0, "--request-timeout", help=TIMEOUT_HELP)
    warm_pool: bool = option(False, "--warm-pool", help="keep one process for all prompts of an n-gram type whose "
                             "state outlives a request (ngram-mod, ngram-map-k(4v), ngram-cache), so later prompts "
                             "start warm; default: a new process per run, cold")

    def __post_init__(self) -> None:
        check_timeout(self.request_timeout_s)


def check_timeout(seconds: float) -> None:
    if seconds <= 0:
        raise ConfigError(f"--request-timeout must be above 0 seconds, got {seconds:g}")
