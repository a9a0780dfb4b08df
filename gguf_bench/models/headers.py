"""GGUF headers of models without downloading them: the cached file when there is one, else the first megabytes of
each of its files on the hub (HTTP range reads through huggingface_hub's session), read until the header ends. A 70B
file's header is a few MB; its weights are never fetched. A split model's every part is read (models/parts.py).

`HubReader` is the one ranged reader of hub headers: each range goes on where the last one stopped, doubling, and it
counts the requests and bytes it made (the drafts finder prints them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gguf_bench.errors import DownloadError, ModelError
from gguf_bench.models.download import hub_error_message, hub_filename, locate
from gguf_bench.models.files import split_parts
from gguf_bench.models.gguf import HeaderCutShort
from gguf_bench.models.parts import ModelHeader, PartHeader, joined, local_header, part_header
from gguf_bench.models.registry import HubSource, ModelRef, Named, name_model

FIRST_READ = 2**18  # the first range of a hub header; $GGUF_BENCH_HEADER_READ overrides it
LARGEST_HEADER = 256 * 2**20


@dataclass
class ReadStats:
    bytes: int = 0  # hub bytes received
    requests: int = 0  # ranged GETs of hub files
    headers_read: int = 0  # headers parsed (hub or local)
    cached: int = 0  # headers answered by the cache


class HubReader:
    """Headers of hub files by range requests; `stats` counts what it fetched."""

    def __init__(self, stats: ReadStats | None = None):
        self.stats = stats or ReadStats()

    def header(self, repo: str, name: str, revision: str | None = None,
               keep: frozenset[str] = frozenset()) -> ModelHeader:
        """The header of the model REPO/NAME (any part's name of a split model: every part is read)."""
        parts = [self.part(repo, n, revision, keep) for n in split_parts(name)]
        return joined(f"{repo}/{name}", parts)

    def part(self, repo: str, name: str, revision: str | None, keep: frozenset[str] = frozenset()) -> PartHeader:
        """One file's header: ranges from byte 0, each going on where the last stopped and twice as far."""
        where, data = f"{repo}/{name}", bytearray()
        start, end = 0, int(os.environ.get("GGUF_BENCH_HEADER_READ", FIRST_READ))
        while True:
            chunk = self._range(repo, name, revision, start, end)
            data += chunk
            try:
                return part_header(data, where, keep=keep)
            except HeaderCutShort:
                if len(chunk) < end - start or end >= LARGEST_HEADER:
                    raise ModelError(f"{where}: the file ends (or passes {LARGEST_HEADER // 2**20} MiB) before its "
                                     "header does") from None
                start, end = end, end * 2

    def _range(self, repo: str, name: str, revision: str | None, start: int, end: int) -> bytes:
        """Bytes [start, end) of a hub file, by one range request (a server that ignores Range is read that far)."""
        from huggingface_hub import constants, hf_hub_url
        from huggingface_hub.utils import build_hf_headers, get_session

        url = hf_hub_url(repo, name, revision=revision, endpoint=constants.ENDPOINT)
        headers = {**build_hf_headers(), "Range": f"bytes={start}-{end - 1}"}
        out, skip = bytearray(), 0
        self.stats.requests += 1
        try:
            with get_session().stream("GET", url, headers=headers, follow_redirects=True, timeout=60) as resp:
                resp.raise_for_status()
                skip = start if resp.status_code == 200 else 0  # Range ignored: the file from its start
                for chunk in resp.iter_bytes():
                    out += chunk
                    if len(out) >= end - start + skip:
                        break
        except Exception as exc:  # unreachable, gated, missing: one line, as a download says it
            raise ModelError(hub_error_message(HubSource(repo=repo, file=name, revision=revision), name, exc)) from None
        finally:
            self.stats.bytes += len(out)
        return bytes(out[skip:end - start + skip])


def _hub_source(ref: ModelRef) -> HubSource:
    if not isinstance(ref.source, HubSource):
        raise DownloadError(f"model '{ref.name}' is not downloaded and not on the hub ({ref.source.label}): "
                            f"run `gguf-bench download` for its pair first")
    return ref.source


def hub_header(src: HubSource, reader: HubReader | None = None) -> ModelHeader:
    """The header of the hub model `src` names (its file, or the one its pattern picks; every part if split)."""
    return (reader or HubReader()).header(src.repo, hub_filename(src, online=True), src.revision)


def source_header(source: str, registry: Path | None = None) -> ModelHeader:
    """The header of SOURCE, labelled: a local GGUF file (any part of a split model), a model of the registry (its
    cached file, else its hub file), or a hub file in llama.cpp's -hf spelling (REPO[:QUANT] or REPO/FILE.gguf)."""
    return named_header(name_model(source, registry))


def named_header(named: Named) -> ModelHeader:
    """The header of a model whose name is resolved already (source_header's, without reading the name again)."""
    if named.path is not None:
        return local_header(named.path)
    if named.ref is not None:
        path = locate(named.ref, named.registry)
        if path is None:
            return hub_header(_hub_source(named.ref))
        header = local_header(path)
        return ModelHeader(f"{named.ref.name} ({path.name})", header.parts)
    return hub_header(named.hub)
