"""Files on disk, apart from how they are fetched: cache folders, split-part names, sha256 (remembered).

Used by downloads, by `ggufinfo` (sizes of split files) and by `results` (hashes in every record).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path

from gguf_bench.errors import DownloadError

# progress(description, done_bytes, total_bytes); total may be None
Progress = Callable[[str, int, "int | None"], None]

SPLIT_RE = re.compile(r"^(?P<stem>.*)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$")


def no_progress(desc: str, done: int, total: int | None) -> None:
    pass


def cache_dir() -> Path:
    """`$GGUF_BENCH_CACHE`, else `$XDG_CACHE_HOME/gguf-bench`, else ~/.cache/gguf-bench."""
    env = os.environ.get("GGUF_BENCH_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "gguf-bench"


def split_parts(filename: str) -> list[str]:
    """All file names of a split GGUF given any part's name; [filename] if not split."""
    m = SPLIT_RE.match(filename)
    if not m:
        return [filename]
    n = int(m["n"])
    return [f"{m['stem']}-{i:05d}-of-{n:05d}.gguf" for i in range(1, n + 1)]


def sha256_file(path: Path, progress: Progress = no_progress) -> str:
    digest = hashlib.sha256()
    total = path.stat().st_size
    done = 0
    with open(path, "rb") as fh:
        while block := fh.read(8 << 20):
            digest.update(block)
            done += len(block)
            progress(f"sha256 {path.name}", done, total)
    return digest.hexdigest()


def _verified_db() -> Path:
    return cache_dir() / "verified.json"


def _file_key(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"


def is_verified(path: Path, sha: str) -> bool:
    return read_json(_verified_db()).get(_file_key(path)) == sha


def remember_verified(path: Path, sha: str) -> None:
    db = read_json(_verified_db())
    db[_file_key(path)] = sha
    write_json(_verified_db(), db)


def verify(path: Path, expected: str, progress: Progress = no_progress) -> None:
    """Raise unless `path` hashes to `expected`; remember a success."""
    if is_verified(path, expected):
        return
    actual = sha256_file(path, progress)
    if actual != expected:
        raise DownloadError(
            f"checksum mismatch for {path}: expected sha256 {expected}, got {actual}; "
            "delete the file and download again, or fix sha256 in the registry"
        )
    remember_verified(path, expected)


def file_sha256(path: Path) -> str:
    """sha256 of a file, computed once per (path, size, mtime) and remembered."""
    key = _file_key(path)
    known = read_json(_verified_db()).get(key)
    if known:
        return known
    sha = sha256_file(path)
    remember_verified(path, sha)
    return sha


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def drop_page_cache(path: Path) -> None:
    """Ask the kernel to drop a file's pages from the page cache (posix_fadvise DONTNEED; a no-op where it has none).

    For benchmarks that compare files: how a file's pages came into the page cache changes a memory-bound decode by
    several percent on these VMs (the same bytes ran 8% faster when re-read after a drop than as cached by the write
    that made them), so each side is dropped before it loads and both are read back the same way. Pages that are
    mapped or dirty stay: drop before loading, not while a model holds the file.
    """
    if not hasattr(os, "posix_fadvise"):
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)  # dirty pages are not dropped: write them first
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
