"""Append-only JSONL run records with the environment they were measured in.

Each record is written with one `write` to a file opened with O_APPEND and then fsynced, so a
crash leaves whole lines only; `load_records` skips a torn last line should one ever appear.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from gguf_bench.errors import BenchError


def results_dir() -> Path:
    """`$GGUF_BENCH_RESULTS`, else ./results."""
    return Path(os.environ.get("GGUF_BENCH_RESULTS", "results"))


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def default_name(prefix: str) -> str:
    """A results name from the time: 'sweep-20261122T023941'."""
    return f"{prefix}-{datetime.now(UTC):%Y%m%dT%H%M%S}"


def append_record(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_records(path: Path) -> list[dict]:
    """Records of one JSONL file; a torn (unparseable) line is skipped."""
    records = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError:
                    continue
    return records


def load_records(paths: list[Path]) -> list[dict]:
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += sorted(p.glob("*.jsonl"))
        elif p.is_file():
            files.append(p)
        else:
            raise BenchError(f"results file {p} not found; `ls {results_dir()}` shows stored sweeps")
    if not files:
        raise BenchError(f"no .jsonl results in {', '.join(map(str, paths))}; run `gguf-bench sweep` first")
    return [r for f in files for r in read_records(f)]


@functools.lru_cache(maxsize=1)
def environment() -> dict:
    """What a measurement depends on besides its configuration."""
    from gguf_bench import __version__
    from gguf_bench.backend import llama_versions

    env = {"gguf_bench": __version__, **llama_versions(), "python": platform.python_version(),
           "platform": platform.platform(), "cpu": _cpu_model(), "cpu_count": os.cpu_count()}
    env.update(_gpu())
    return env


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu() -> dict:
    if not shutil.which("nvidia-smi"):
        return {"gpu": None}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return {"gpu": None}
    if not out:
        return {"gpu": None}
    name, _, mem = out[0].partition(",")
    return {"gpu": name.strip(), "gpu_memory": mem.strip(), "gpu_count": len(out)}


def models_record(target: Path, draft: Path) -> dict:
    return {"target": model_record(target), "draft": model_record(draft)}


def model_record(path: Path) -> dict:
    from gguf_bench.download import file_sha256

    return {"file": path.name, "path": str(path), "size": path.stat().st_size, "sha256": file_sha256(path)}
