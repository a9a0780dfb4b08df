"""Results-file names: a sweep's (new, or continued with --resume) and a run's (always a new file), in a folder proven
writable."""

from __future__ import annotations

from pathlib import Path

from gguf_bench import options
from gguf_bench.errors import ConfigError
from gguf_bench.results.schema.store import default_name, ensure_results_dir


def check_new(out: Path, resume: bool) -> None:
    """One line where a sweep would write into a results file that exists without --resume: the one check, made when
    the name is chosen and again under the file's lock."""
    if out.exists() and not resume:
        raise ConfigError(f"{out} already exists; pass --resume to continue it, or choose another --name")


def results_path(name: str | None, resume: bool, prefix: str = "sweep") -> tuple[str, Path]:
    """The sweep's name (PREFIX-TIMESTAMP when not given) and its results file."""
    if resume and not name:
        raise ConfigError(f"--resume needs --name NAME of the {prefix} to continue")
    name = options.results_name(name or fresh_name(prefix))
    out = ensure_results_dir() / f"{name}.jsonl"
    check_new(out, resume)
    return name, out


def run_path(name: str | None) -> Path:
    """`run`'s results file: always a new file. A run never adds to a file that exists (a sweep's would pool the run's
    records with its own in `report`)."""
    name = options.results_name(name or fresh_name("run"))
    out = ensure_results_dir() / f"{name}.jsonl"
    if out.exists():
        raise ConfigError(f"{out} already exists and `run` stores its records in a new file; choose another --name "
                          "(or leave it out: run-TIMESTAMP)")
    return out


def fresh_name(prefix: str) -> str:
    """'run-20261122T023941', or with -2, -3, ... when a file of that name exists (two runs in one second)."""
    base = default_name(prefix)
    folder = ensure_results_dir()
    return next(n for n in (base, *(f"{base}-{i}" for i in range(2, 1000))) if not (folder / f"{n}.jsonl").exists())
