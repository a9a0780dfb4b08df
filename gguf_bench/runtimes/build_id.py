"""Which llama.cpp build ran, as it says of itself, and the file it is: what each run record names (its `build` part).

Community tables now refuse a row without the build, and a build can matter more than K (one pair at 937 tokens/s on
one build and about 170 on a later one, llama.cpp#25908). A build is identified by:
- its version, build number and commit: `llama-server --version` (or `llama serve --version`) prints
  `version: 0.5.0-dev (build 1234, commit 0c1e570)` (common/build-info.cpp); libllama itself knows only its version
  (`llama_version()`) and ggml its commit (`ggml_commit()`, set to llama.cpp's when built inside it), not the build
  number;
- `llama_print_system_info()`: the CPU features and backends compiled in (the Python loop calls it; llama-server logs
  it at -lv 4 as `system_info: n_threads = ... | <the same text>`);
- the sha256 of the binary (llama-server, llama) or the library (libllama) that ran, hashed once per process.

Plain dicts here (the record's part is results/schema/parts/provenance.Build, a layer above).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from pathlib import Path

# 'version: 0.5.0-dev (build 1234, commit 0c1e570)'; before llama.cpp numbered releases: 'version: 1234 (0c1e570)'
_VERSION = re.compile(r"version:\s*(?P<version>\S+)\s*\(build (?P<number>\d+), commit (?P<commit>[^)\s]+)\)")
_OLD_VERSION = re.compile(r"version:\s*(?P<number>\d+)\s*\((?P<commit>[^)\s]+)\)")
_SYSTEM_INFO = re.compile(r"system_info: n_threads = [^|]*\|\s*(?P<info>.*\S)")


def parse_version(text: str) -> dict:
    """llama.cpp's version, build number and commit from a `--version` output (None where it does not say)."""
    if m := _VERSION.search(text):
        return {"version": m["version"], "build_number": int(m["number"]), "commit": m["commit"]}
    if m := _OLD_VERSION.search(text):
        return {"version": None, "build_number": int(m["number"]), "commit": m["commit"]}
    return {"version": None, "build_number": None, "commit": None}


def system_info_from_log(lines: list[str]) -> str | None:
    """`llama_print_system_info()` as llama-server logs it at start (-lv 4), its thread counts aside."""
    for line in lines:
        if m := _SYSTEM_INFO.search(line):
            return m["info"]
    return None


def sha256(path: Path) -> str:
    """The file's sha256, read once per process (by its resolved path, size and modification time)."""
    real = Path(os.path.realpath(path))
    st = real.stat()
    return _sha256(str(real), st.st_size, st.st_mtime_ns)


@functools.cache
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def of_file(path: Path) -> dict:
    """The path and sha256 of a binary or library (None for a file that cannot be read)."""
    try:
        return {"path": str(path), "sha256": sha256(path)}
    except OSError:
        return {"path": str(path), "sha256": None}


def of_server(binary: Path, version_text: str, log_lines: list[str]) -> dict:
    """A llama-server build: its `--version` text, its start log's system_info, its binary."""
    return {**parse_version(version_text), "system_info": system_info_from_log(log_lines), **of_file(binary)}
