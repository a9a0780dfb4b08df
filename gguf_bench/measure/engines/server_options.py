"""llama-server's own options (the server engine): which binary (or binaries: --server-bin A,B makes each a setting of
the sweep), how long a request may take, whether n-gram types whose state outlives a request share one process."""

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
                                     "else the one `gguf-bench build-server` made); a comma list A,B measures each "
                                     "build as a setting of one sweep, in turn like two -ngl values",
                                     commands=("run", "sweep", "tune"))
    request_timeout_s: float = option(600.0, "--request-timeout", help=TIMEOUT_HELP)
    warm_pool: bool = option(False, "--warm-pool", help="keep one process for all prompts of an n-gram type whose "
                             "state outlives a request (ngram-mod, ngram-map-k(4v), ngram-cache), so later prompts "
                             "start warm; default: a new process per run, cold")

    def __post_init__(self) -> None:
        check_timeout(self.request_timeout_s)
        self.binaries()

    def binaries(self) -> list[Path]:
        """--server-bin's binaries, as given ([] where none is: the one found); one line for a list naming one twice."""
        if self.server_bin is None:
            return []
        given = [Path(p.strip()) for p in str(self.server_bin).split(",") if p.strip()]
        if len(set(given)) < len(given):
            twice = next(p for p in given if given.count(p) > 1)
            raise ConfigError(f"--server-bin names {twice} twice: give each build once (a copy or a link under another "
                              "path measures the same build twice, for an A/A comparison)")
        return given

    def load_axes(self) -> dict[str, list]:
        """Several binaries: the grid's server_bins (plan.LOAD_AXES), one setting each; one: none (the engine's own)."""
        return {"server_bins": self.binaries()} if len(self.binaries()) > 1 else {}


def check_timeout(seconds: float) -> None:
    if seconds <= 0:
        raise ConfigError(f"--request-timeout must be above 0 seconds, got {seconds:g}")
