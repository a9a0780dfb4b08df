"""GGUF headers of registry models without downloading them: the cached file when there is one, else the first
megabytes of the file on the hub (HTTP range reads through huggingface_hub's session), read until the header
ends. A 70B file's header is a few MB; its weights are never fetched."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from gguf_bench.errors import DownloadError
from gguf_bench.models.download import hub_error_message, hub_filename, locate
from gguf_bench.models.gguf import HeaderCutShort, check_magic, header_layout
from gguf_bench.models.registry import HubSource, ModelRef, name_model

FIRST_READ = 8 * 2**20  # $GGUF_BENCH_HEADER_READ overrides it (tests read a tiny header in pieces)
LARGEST_HEADER = 256 * 2**20


def _hub_source(ref: ModelRef) -> HubSource:
    if not isinstance(ref.source, HubSource):
        raise DownloadError(f"model '{ref.name}' is not downloaded and not on the hub ({ref.source.label}): "
                            f"run `gguf-bench download` for its pair first")
    return ref.source


def hub_prefix(src: HubSource) -> tuple[bytes, str]:
    """The first bytes of a hub file, as many as its header takes (range requests, growing), and its name."""
    name = hub_filename(src, online=True)
    where = f"{src.repo}/{name}"
    n = int(os.environ.get("GGUF_BENCH_HEADER_READ", FIRST_READ))
    while True:
        data = _first_bytes(src, name, n)
        try:
            header_layout(data, where)
            return data, where
        except HeaderCutShort:
            if len(data) < n or n >= LARGEST_HEADER:  # the whole file, or an absurd header: not a GGUF we can read
                raise
            n *= 4


def file_prefix(path: Path) -> bytes:
    """A local GGUF file's header bytes (up to the end of its tensor infos); the weights are not read."""
    path = check_magic(path)
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        _meta, _tensors, layout = header_layout(buf, str(path))
        return bytes(buf[:layout.infos[1]])


def source_prefix(source: str, registry: Path | None = None) -> tuple[bytes, str]:
    """The header bytes of SOURCE and a description of it: a local GGUF file, a model of the registry (its cached
    file, else its hub file), or a hub file in llama.cpp's -hf spelling (REPO[:QUANT] or REPO/FILE.gguf)."""
    named = name_model(source, registry)
    if named.path is not None:
        return file_prefix(named.path), str(source)
    if named.ref is not None:
        path = locate(named.ref, named.registry)
        return (file_prefix(path), f"{named.ref.name} ({path.name})") if path else hub_prefix(_hub_source(named.ref))
    return hub_prefix(named.hub)


def _first_bytes(src: HubSource, name: str, n: int) -> bytes:
    """The first n bytes of a hub file, by a range request (a server that ignores Range is read only that far)."""
    from huggingface_hub import constants, hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session

    url = hf_hub_url(src.repo, name, revision=src.revision, endpoint=constants.ENDPOINT)
    headers = {**build_hf_headers(), "Range": f"bytes=0-{n - 1}"}
    out = bytearray()
    try:
        with get_session().stream("GET", url, headers=headers, follow_redirects=True, timeout=60) as resp:
            resp.raise_for_status()
            for chunk in resp.iter_bytes():
                out += chunk
                if len(out) >= n:
                    break
    except Exception as exc:  # unreachable, gated, missing: one line, as a download says it
        raise DownloadError(hub_error_message(src, name, exc)) from None
    return bytes(out[:n])
