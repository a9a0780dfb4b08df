"""Hub downloads that resume across calls.

huggingface_hub 2.x writes each transfer to a file unique to its process and deletes it when the transfer fails, so a
download cut off (a lost connection after its retries, Ctrl-C, SIGKILL, a power cut) starts again from byte 0. Here
the bytes go to `blobs/<etag>.gguf-bench.incomplete` in huggingface_hub's own cache layout, under its own lock for
that blob, through its own `http_get`; the next call sends `Range: bytes=N-` for the rest. A finished file becomes
`blobs/<etag>` only when its size and sha256 are the hub's; `hf_hub_download` then finds the blob and links it into
the snapshot, so the cache layout and refs stay the library's.

The trade-off: the bytes come over plain HTTP, even from a Xet-backed repository (through the hub's HTTP bridge, as
huggingface_hub does when hf_xet is not installed).
"""

from __future__ import annotations

import functools
import inspect
import os
import re
from pathlib import Path

from gguf_bench.errors import DownloadError
from gguf_bench.models.files import Progress, no_progress, sha256_file

SUFFIX = ".gguf-bench.incomplete"  # after the etag: a name huggingface_hub neither writes nor cleans up
# huggingface_hub's http_get is not public API: what _transfer passes it, checked before the first transfer
# (checked_http_get). It takes these from 1.1.0 (1.0.x has no tqdm_class) to 2.4.0, the newest checked.
OLDEST_HUB = "1.1"  # pyproject.toml's lower bound
HTTP_GET_ARGS = ("url", "sink")
HTTP_GET_KWARGS = ("resume_size", "headers", "expected_size", "tqdm_class")


class Cut(Exception):
    """A transfer that failed after `kept` bytes reached the disk; the next call resumes from there."""

    def __init__(self, cause: Exception, kept: int):
        super().__init__(str(cause))
        self.cause, self.kept = cause, kept

    @property
    def note(self) -> str:
        return f"; {self.kept / 1e6:.0f} MB of it kept: the next call resumes from there"


def fetch_blob(repo: str, filename: str, revision: str | None, tqdm_class=None,
               progress: Progress = no_progress) -> None:
    """Put `filename`'s blob in the hub cache, continuing a partial one an earlier call left. Returns quietly when the
    file's metadata cannot be had: `hf_hub_download` meets the same failure and reports it as it always has."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.file_download import repo_folder_name
    from huggingface_hub.utils import WeakFileLock

    http_get = checked_http_get()  # before any request: a changed huggingface_hub is one line, not a TypeError
    url = hf_hub_url(repo, filename, revision=revision)
    try:
        meta = get_hf_file_metadata(url)
    except Exception:
        return
    if not meta.etag:
        return
    folder = repo_folder_name(repo_id=repo, repo_type="model")
    blob = Path(constants.HF_HUB_CACHE) / folder / "blobs" / meta.etag
    lock = Path(constants.HF_HUB_CACHE) / ".locks" / folder / f"{meta.etag}.lock"
    for d in (blob.parent, lock.parent):
        d.mkdir(parents=True, exist_ok=True)
    with WeakFileLock(lock):
        if blob.exists():
            return
        partial = blob.with_name(meta.etag + SUFFIX)
        _transfer(http_get, url, meta, partial, tqdm_class)
        _check(partial, meta, filename, progress)
        os.replace(partial, blob)


@functools.cache
def checked_http_get():
    """huggingface_hub.file_download.http_get, once checked to take what _transfer passes; a DownloadError naming the
    installed version, what changed and the pin to install when it does not (it is gone, or its parameters changed)."""
    import huggingface_hub
    from huggingface_hub import file_download

    http_get = getattr(file_download, "http_get", None)
    changed = http_get_change(http_get)
    if changed:
        version = huggingface_hub.__version__
        raise DownloadError(f"huggingface_hub {version} changed the function gguf-bench downloads through "
                            f"(huggingface_hub.file_download.http_get, not public API): {changed}; install the range "
                            f"gguf-bench supports: pip install '{supported_pin(version)}'")
    return http_get


def supported_pin(installed: str) -> str:
    """The requirement to install instead of `installed`: below it, or the supported range when it is older."""
    from packaging.version import InvalidVersion, Version

    try:
        newer = Version(installed) >= Version(OLDEST_HUB)
    except InvalidVersion:
        newer = False
    return f"huggingface-hub>={OLDEST_HUB},<{installed}" if newer else f"huggingface-hub>={OLDEST_HUB},<3"


def http_get_change(http_get) -> str | None:
    """What keeps `http_get` from taking _transfer's call (HTTP_GET_ARGS, HTTP_GET_KWARGS), or None."""
    if not callable(http_get):
        return "it is gone"
    try:
        sig = inspect.signature(http_get)
    except (TypeError, ValueError):
        return "its signature cannot be read"
    try:
        sig.bind(*HTTP_GET_ARGS, **dict.fromkeys(HTTP_GET_KWARGS))
    except TypeError as exc:
        call = ", ".join([*HTTP_GET_ARGS, *(f"{k}=" for k in HTTP_GET_KWARGS)])
        return f"it no longer takes http_get({call}): {exc}"
    return None


def _transfer(http_get, url: str, meta, partial: Path, tqdm_class) -> None:
    """Append what `partial` lacks of the file (all of it when it holds more than the file: another version), through
    `http_get` (checked_http_get's)."""
    from urllib.parse import urlparse

    from huggingface_hub.utils import build_hf_headers

    have = partial.stat().st_size if partial.exists() else 0
    if meta.size is not None and have > meta.size:
        partial.unlink()
        have = 0
    headers = build_hf_headers()
    if urlparse(meta.location).netloc != urlparse(url).netloc:
        headers.pop("authorization", None)  # a signed CDN address: no token, as hf_hub_download does
    try:
        with partial.open("ab") as sink:
            http_get(meta.location, sink, resume_size=have, headers=headers, expected_size=meta.size,
                     tqdm_class=tqdm_class)
    except BaseException as exc:  # Ctrl-C too: the bytes stay for the next call
        kept = partial.stat().st_size if partial.exists() else 0
        if not kept:
            partial.unlink(missing_ok=True)
        if isinstance(exc, Exception) and kept:
            raise Cut(exc, kept) from exc
        raise


def _check(partial: Path, meta, filename: str, progress: Progress) -> None:
    """The size and, for an LFS file (every GGUF: its etag is the sha256), the sha256 the hub gives, or the bytes go."""
    size = partial.stat().st_size
    sha = meta.etag if re.fullmatch(r"[0-9a-f]{64}", meta.etag) else None
    if (meta.size is None or size == meta.size) and (sha is None or sha256_file(partial, progress) == sha):
        return
    partial.unlink()
    raise DownloadError(f"{filename}: the bytes downloaded do not match the hub's size and sha256 (a partial file kept "
                        "from an earlier call was damaged, or the file changed on the hub): deleted them; run the "
                        "command again to download the whole file")
