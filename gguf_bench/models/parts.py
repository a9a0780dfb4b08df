"""A model's header across all its files: a split GGUF (`NAME-00001-of-0000N.gguf`, llama-gguf-split) is one model.

Every part is a whole GGUF file with its own header (docs/big-models.md): part 1 holds the model's metadata, each part
lists its own tensors with offsets into its own data section, and `split.count` / `split.tensors.count` say how many
parts and tensors the model has. A ModelHeader is every part's header read once: metadata from part 1, tensors from
all parts, sizes summed. It is read from local files here and from hub range reads in models/headers.py; everything
that asks what a model holds (the planner, the drafts finder, twins, placement checks, `info`) reads it from this value.
"""

from __future__ import annotations

import functools
import mmap
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from gguf_bench.errors import ModelError
from gguf_bench.models.files import split_parts
from gguf_bench.models.gguf import HeaderLayout, TensorInfo, header_layout
from gguf_bench.models.offload_plan import tensor_bytes

SPLIT_COUNT, SPLIT_NO, SPLIT_TENSORS = "split.count", "split.no", "split.tensors.count"


@dataclass(frozen=True)
class PartHeader:
    """One file's header: its bytes up to the end of its tensor infos, and what they say."""

    name: str  # the file's name (a local path, or REPO/FILE on the hub)
    prefix: bytes
    meta: MappingProxyType  # read-only: a header read once is shared by everyone who asks
    tensors: tuple[TensorInfo, ...]
    layout: HeaderLayout
    size: int  # the file's bytes as its tensor infos lay them out (a header-only file counts its tensors' data)


@dataclass(frozen=True)
class ModelHeader:
    """A model's header: one part, or every part of a split GGUF in order."""

    label: str  # how it was named, for messages
    parts: tuple[PartHeader, ...]

    @property
    def meta(self) -> MappingProxyType:
        return self.parts[0].meta

    @property
    def tensors(self) -> list[TensorInfo]:
        return [t for p in self.parts for t in p.tensors]

    @property
    def size(self) -> int:
        return sum(p.size for p in self.parts)

    @property
    def split(self) -> bool:
        return len(self.parts) > 1

    def table(self) -> tuple[dict, list[TensorInfo]]:
        """(metadata, tensors): what memory.Shape.from_header and the engines' checks read."""
        return self.meta, self.tensors


def laid_out_size(layout: HeaderLayout, tensors) -> int:
    """A GGUF file's size from its header alone: the data section starts aligned after the infos, the last tensor ends it."""
    end = max((t.offset + tensor_bytes(t.type_name, t.shape) for t in tensors), default=0)
    return layout.data_start + end


def part_header(buf, name: str, size: int | None = None, keep: frozenset[str] = frozenset()) -> PartHeader:
    """One part's header from its first bytes (enough for the header: models/gguf.HeaderCutShort otherwise); `size`:
    the file's size where known (a local file's, with any padding after its data)."""
    meta, tensors, layout = header_layout(buf, name, keep)
    return PartHeader(name, bytes(buf[:layout.infos[1]]), MappingProxyType(meta), tuple(tensors), layout,
                      max(size or 0, laid_out_size(layout, tensors)))


def joined(label: str, parts: list[PartHeader]) -> ModelHeader:
    """The parts as one model, after checking they are the parts their headers promise: `split.count` parts numbered
    in order, `split.tensors.count` tensors in all, no tensor twice."""
    first = parts[0].meta
    count = int(first.get(SPLIT_COUNT) or 1)
    if count != len(parts):
        raise ModelError(f"{label}: its header says the model is in {count} parts, {len(parts)} were found; "
                         f"name the model by one of its {count} files (NAME-00001-of-{count:05d}.gguf), all beside it")
    for i, part in enumerate(parts):
        if len(parts) > 1 and int(part.meta.get(SPLIT_NO, -1)) != i:
            raise ModelError(f"{part.name}: it says it is part {int(part.meta.get(SPLIT_NO, -1)) + 1}, its place is "
                             f"part {i + 1}: the files of two split models are mixed; download them again")
    model = ModelHeader(label, tuple(parts))
    names = [t.name for t in model.tensors]
    want = int(first.get(SPLIT_TENSORS) or len(names))
    if len(names) != want or len(set(names)) != len(names):
        raise ModelError(f"{label}: its parts hold {len(names)} tensors ({len(set(names))} distinct) where part 1 "
                         f"says {want}: a part is damaged or from another model; download it again")
    return model


def part_paths(path: Path) -> list[Path]:
    """Every file of the model `path` is part of (any part's name), in order; [path] for a single file."""
    path = Path(path)
    return [path.with_name(n) for n in split_parts(path.name)]


def model_path(path: Path) -> Path:
    """The path llama.cpp loads the model in `path` from (part 1 for any part of a split model), after checking that
    every part is there; one line naming the missing ones otherwise."""
    paths = part_paths(path)
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        if not Path(path).is_file():
            raise ModelError(f"{path} does not exist")
        raise ModelError(f"{Path(path).name} is part of a model in {len(paths)} files and {', '.join(missing[:3])}"
                         f"{' ...' if len(missing) > 3 else ''} {'is' if len(missing) == 1 else 'are'} not beside it in "
                         f"{Path(path).parent}: download every part")
    return paths[0]


def model_size(path: Path) -> int:
    """The bytes on disk of the model in `path` (any part of a split GGUF: every part's together; one file's size
    otherwise), after checking every part is there: what a record stores, the memory check needs and `models` prints."""
    return sum(p.stat().st_size for p in part_paths(model_path(path)))


def local_header(path: Path, keep: frozenset[str] = frozenset()) -> ModelHeader:
    """The header of the model in `path` (a file, or any part of a split model: every part is read)."""
    path = Path(path)
    paths = part_paths(model_path(path))
    parts = [read_part(p, keep) for p in paths]
    if len(paths) == 1 and int(parts[0].meta.get(SPLIT_COUNT) or 1) > 1:
        n = int(parts[0].meta[SPLIT_COUNT])
        raise ModelError(f"{path.name} is part {int(parts[0].meta.get(SPLIT_NO, 0)) + 1} of a model split in {n} files, "
                         f"but its name does not say so (NAME-00001-of-{n:05d}.gguf): llama.cpp finds the other parts "
                         "by that name; keep the names llama-gguf-split gave them")
    return joined(str(path), parts)


def read_part(path: Path, keep: frozenset[str] = frozenset()) -> PartHeader:
    """One local file's own header (a split model's part: its own tensors only). Read once per file version: the
    same path, size and modification time give the header already read (engines, planner and checks all ask)."""
    try:
        st = Path(path).stat()
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from None
    return _read_part(str(path), st.st_size, st.st_mtime_ns, keep)


@functools.lru_cache(maxsize=8)  # a header with its vocabulary kept is ~10 MB: a few models' worth
def _read_part(path: str, size: int, mtime_ns: int, keep: frozenset[str]) -> PartHeader:
    try:
        with open(path, "rb") as fh:
            if fh.read(4) != b"GGUF":
                raise ModelError(f"{path} is not a GGUF file (no GGUF magic at its start)")
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return part_header(buf, path, size, keep)
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError:  # mmap of an empty file
        raise ModelError(f"{path} is empty: not a GGUF file") from None


def tensor_table(path: Path) -> tuple[dict[str, object], list[TensorInfo]]:
    """The scalar and string metadata (part 1's) and the tensor table (every part's) of the model in `path`, read from
    its headers alone. gguf.GGUFReader parses every array value (20 s for a 262k-token vocabulary); this skips them."""
    return local_header(path).table()

