"""Append-only JSONL run records with the environment they were measured in.

Each record is written to a file opened with O_APPEND and then fsynced. A write that fails part way
(disk full, file-size limit) is cut back off, so the file keeps whole lines only and the records
before it stay; `read_records` skips a torn line should a crash ever leave one (`report` names it), and the next append
starts on a new line.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import json
import os
import platform
import shutil
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from gguf_bench.errors import BusyError, ResultsError
from gguf_bench.models.files import file_sha256
from gguf_bench.models.parts import model_size, part_paths
from gguf_bench.models.twin import is_agreeing_file, is_twin_file
from gguf_bench.results.schema.calibration import CalibrationRecord
from gguf_bench.results.schema.evaluation import EvalRecord
from gguf_bench.results.schema.parts.provenance import Environment, ModelFile, Models
from gguf_bench.results.schema.records import Record, RunRecord, parse, to_dict

Stored = RunRecord | EvalRecord | CalibrationRecord


_chosen_dir: Path | None = None  # --results-dir of the command this process runs


def use_results_dir(folder: Path | None) -> None:
    """The folder a command's --results-dir names (None: none named) for every later `results_dir()`."""
    global _chosen_dir
    _chosen_dir = Path(folder) if folder is not None else None


def results_dir() -> Path:
    """--results-dir (use_results_dir), else `$GGUF_BENCH_RESULTS`, else ./results."""
    return _chosen_dir or Path(os.environ.get("GGUF_BENCH_RESULTS", "results"))


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def default_name(prefix: str) -> str:
    """A results name from the time: 'sweep-20261122T023941'."""
    return f"{prefix}-{datetime.now(UTC):%Y%m%dT%H%M%S}"


def ensure_results_dir(folder: Path | None = None) -> Path:
    """Create the results folder (default `results_dir()`) and prove a file can be written in it.

    Called before any model is loaded, so a folder that cannot hold results costs no work.
    """
    folder = Path(folder) if folder is not None else results_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=folder)
        try:
            _write_all(fd, b"gguf-bench write test\n")
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        why = "it is a file, not a folder" if folder.exists() and not folder.is_dir() else _os_reason(exc, folder)
        raise ResultsError(f"cannot store results in {folder} ({_whence(folder)}): {why}; "
                           "give --results-dir (or set $GGUF_BENCH_RESULTS to) a folder you can write") from None
    return folder


def _whence(folder: Path) -> str:
    if folder != results_dir():
        return "given folder"
    if _chosen_dir is not None:
        return "from --results-dir"
    return ("from $GGUF_BENCH_RESULTS" if os.environ.get("GGUF_BENCH_RESULTS")
            else "the default; --results-dir or $GGUF_BENCH_RESULTS moves it")


# Results files this process holds the writer's lock of (path -> the lock file's descriptor).
_locked: dict[Path, int] = {}


@contextlib.contextmanager
def exclusive(path: Path):
    """Be the only gguf-bench process writing results file `path` while the block runs: an exclusive flock on
    `.NAME.jsonl.lock` beside it (hidden: a listing of the results shows the results; the file stays, as flock's
    design needs), released when the block ends (or the process dies). Another process that holds it makes this raise
    BusyError at once. Re-entrant within one process (a sweep over several pairs)."""
    key = Path(path).absolute()
    if key in _locked:
        yield
        return
    lock = key.with_name(f".{key.name}.lock")
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ResultsError(f"cannot lock {path} for writing: {_os_reason(exc, lock)}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise BusyError(f"another gguf-bench process is writing {key.stem} ({path}); wait for it to finish, "
                        "or choose another --name") from None
    _locked[key] = fd
    try:
        yield
    finally:
        del _locked[key]
        os.close(fd)  # releases the lock


# Files this process has appended to. If one vanishes mid-run (its folder removed), appending says so
# instead of silently starting a new file that would look like a complete one.
_appended: set[Path] = set()


def append_record(path: Path, record: Stored) -> None:
    """Append `record` as one JSON line; on failure leave the file as it was and raise ResultsError."""
    append_json(path, to_dict(record))


def append_json(path: Path, obj: dict) -> None:
    """Append `obj` as one JSON line (the writer under append_record)."""
    path = Path(path)
    line = (json.dumps(obj, separators=(",", ":"), default=str) + "\n").encode("utf-8")
    known = path.absolute() in _appended
    try:
        if not known:
            path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | (0 if known else os.O_CREAT), 0o644)
    except OSError as exc:
        gone = known and exc.errno == errno.ENOENT
        why = "it (or its folder) was removed during the run" if gone else _os_reason(exc, path)
        raise ResultsError(f"could not append a record to {path}: {why}") from None
    try:
        _append_line(fd, line, path)
    finally:
        os.close(fd)
    _appended.add(path.absolute())


def try_append_record(path: Path, record: Stored) -> ResultsError | None:
    """`append_record`, returning its error instead of raising it: for commands that print a
    result they computed even when it cannot be stored, then fail."""
    try:
        append_record(path, record)
    except ResultsError as exc:
        return ResultsError(f"{exc}; the result printed above was not stored")
    return None


def try_append_records(path: Path, records: list[Stored]) -> ResultsError | None:
    """`try_append_record` for several records: stops at the first that cannot be stored."""
    for record in records:
        if unsaved := try_append_record(path, record):
            return unsaved
    return None


def _append_line(fd: int, line: bytes, path: Path) -> None:
    start = os.fstat(fd).st_size
    if start and os.pread(fd, 1, start - 1) != b"\n":
        line = b"\n" + line  # an earlier crash left a torn line: keep ours whole
    try:
        _write_all(fd, line)
        os.fsync(fd)
    except OSError as exc:
        _cut_back(fd, start, len(line))
        raise ResultsError(f"could not append a record to {path}: {_os_reason(exc, path)}; "
                           "the records already in it are kept") from None


def _write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is out: a write that reaches a file-size limit or a full disk
    first returns short, and only the next one raises (EFBIG, ENOSPC)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, "write returned 0 bytes")
        view = view[n:]


def _cut_back(fd: int, start: int, n_ours: int) -> None:
    """Drop the part of our line that did get written, unless another writer appended after it."""
    try:
        if start < os.fstat(fd).st_size <= start + n_ours:
            os.ftruncate(fd, start)
    except OSError:
        pass  # the next append starts on a new line anyway


def _os_reason(exc: OSError, path: Path) -> str:
    """'File too large (EFBIG)', naming the path the OS complained about when it is not `path`."""
    code = errno.errorcode.get(exc.errno or 0)
    text = (exc.strerror or str(exc)) + (f" ({code})" if code else "")
    if exc.filename and Path(exc.filename) != Path(path):
        text += f" at {exc.filename}"
    return text


def read_records(path: Path) -> list[Record]:
    """Records of one JSONL file; a torn (unparseable) line is skipped."""
    records = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                try:
                    records.append(parse(json.loads(line)))
                except (ValueError, TypeError):
                    continue
    return records


@functools.lru_cache(maxsize=1)
def environment() -> Environment:
    """What a measurement depends on besides its configuration."""
    from gguf_bench import __version__
    from gguf_bench.runtimes.llama_cpp import gpu_devices, llama_versions

    gpus = gpu_devices()
    named = {"gpu": gpus[0].description, "gpu_memory": f"{gpus[0].memory_total // 2**20} MiB", "gpu_count": len(gpus)} if gpus else {}
    return Environment(gguf_bench=__version__, **llama_versions(), python=platform.python_version(),
                       platform=platform.platform(), cpu=_cpu_model(), cpu_count=os.cpu_count(),
                       **(named or _gpu()), devices=[d.label for d in gpus])


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


def models_record(target: Path, draft: Path | None) -> Models:
    """The files a record was measured with (draft None: the target alone, n-gram drafting)."""
    return Models(model_record(target), model_record(draft) if draft else None)


def model_record(path: Path) -> ModelFile:
    """The model in `path` as a record holds it: a split GGUF is one model, its size every part's and its checksum one
    sha256 per part, in order (`part_sha256`; `sha256` is a single file's): docs/big-models.md."""
    twin = is_twin_file(path)  # no sha256 of a twin: its logical size is the model's, and its data is synthetic
    paths = part_paths(path)
    sums = [] if twin else [file_sha256(p) for p in paths]
    return ModelFile(file=path.name, path=str(path), size=model_size(path),
                     sha256=sums[0] if len(paths) == 1 and sums else None, twin=twin,
                     twin_agrees=twin and is_agreeing_file(path),
                     part_sha256=sums if len(paths) > 1 and sums else None)
