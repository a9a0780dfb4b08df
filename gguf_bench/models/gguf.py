"""Read GGUF metadata without loading the model, and check a pair's vocabularies.

Tokens are bytes as stored in the file. The compatibility rules are llama.cpp's (common/speculative.cpp): same vocabulary type,
same BOS/EOS ids and add-BOS/add-EOS flags, sizes within 128, identical token text from id 5 up.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gguf_bench.errors import IncompatiblePairError, ModelError
from gguf_bench.models.files import split_parts

VOCAB_MAX_SIZE_DIFFERENCE = 128
VOCAB_CHECK_START_TOKEN_ID = 5


@dataclass(frozen=True)
class GGUFInfo:
    path: Path
    architecture: str
    name: str
    n_layers: int  # what -ngl counts (llama.cpp offloads the output layer as one more), MTP (NextN) blocks not counted
    n_vocab: int
    vocab_type: str
    quant: str
    file_size: int
    bos_id: int | None
    eos_id: int | None
    add_bos: bool
    add_eos: bool
    context_length: int | None
    tokens: tuple[bytes, ...]
    # every block, MTP (NextN) ones included (block_count): what llama.cpp's "offloaded N/M layers" counts, M = this + 1
    n_blocks: int | None = None


@dataclass(frozen=True)
class Rule:
    name: str
    ok: bool
    detail: str


def check_magic(path: Path) -> Path:
    """`path`, after checking that it exists and starts with the GGUF magic."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path} does not exist")
    with open(path, "rb") as fh:
        if fh.read(4) != b"GGUF":
            raise ModelError(f"{path} is not a GGUF file (no GGUF magic at its start)")
    return path


def info_from_metadata(path: Path, meta: dict) -> GGUFInfo:
    """A GGUFInfo from what llama.cpp read of the vocabulary and metadata (engines.llama_cpp.read_info)."""
    meta = dict(meta)
    file_type = meta.pop("file_type")
    return GGUFInfo(path=path, quant=quant_name(file_type), file_size=total_size(path), **meta)


def trunk_layers(meta) -> int:
    """The blocks llama.cpp counts as layers (what -ngl and -ncmoe count): `block_count` less the MTP (NextN) blocks
    that follow the trunk (`nextn_predict_layers`), which it loads only for draft-mtp."""
    arch = meta.get("general.architecture")
    return int(meta.get(f"{arch}.block_count") or 0) - int(meta.get(f"{arch}.nextn_predict_layers") or 0)


def quant_name(ftype) -> str:
    import gguf

    if ftype is None:
        return "unknown"
    try:
        return gguf.LlamaFileType(int(ftype)).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except ValueError:
        return f"type {ftype}"


def total_size(path: Path) -> int:
    """File size; for split files (...-00001-of-0000N.gguf) the size of all parts found."""
    parts = [path.with_name(n) for n in split_parts(path.name)]
    return sum(p.stat().st_size for p in parts if p.is_file())


def compatibility(target: GGUFInfo, draft: GGUFInfo) -> list[Rule]:
    """llama.cpp's rules for using `draft` to speculate for `target`, each with its verdict, in the order
    common_speculative_are_compatible tests them (`first_failure` is the one it stops at). BOS (EOS) ids are compared
    only when the target adds that token; token texts compare as C strings (up to a NUL byte), like its strcmp."""
    diff = abs(target.n_vocab - draft.n_vocab)
    n = min(target.n_vocab, draft.n_vocab)
    first_bad = next((i for i in range(VOCAB_CHECK_START_TOKEN_ID, n)
                      if _c_str(target.tokens[i]) != _c_str(draft.tokens[i])), None)
    return [
        Rule("vocab type", target.vocab_type == draft.vocab_type, f"{target.vocab_type} / {draft.vocab_type}"),
        Rule("add BOS flag", target.add_bos == draft.add_bos, f"{target.add_bos} / {draft.add_bos}"),
        Rule("BOS id", not target.add_bos or target.bos_id == draft.bos_id,
             f"{target.bos_id} / {draft.bos_id}" + ("" if target.add_bos else " (not compared: no BOS is added)")),
        Rule("add EOS flag", target.add_eos == draft.add_eos, f"{target.add_eos} / {draft.add_eos}"),
        Rule("EOS id", not target.add_eos or target.eos_id == draft.eos_id,
             f"{target.eos_id} / {draft.eos_id}" + ("" if target.add_eos else " (not compared: no EOS is added)")),
        Rule("vocab size", diff <= VOCAB_MAX_SIZE_DIFFERENCE,
             f"{target.n_vocab} / {draft.n_vocab} (difference {diff}, at most {VOCAB_MAX_SIZE_DIFFERENCE})"),
        Rule(f"token text from id {VOCAB_CHECK_START_TOKEN_ID}", first_bad is None,
             "identical" if first_bad is None else
             f"token {first_bad} differs: {target.tokens[first_bad]!r} / {draft.tokens[first_bad]!r}"),
    ]


def _c_str(token: bytes) -> bytes:
    """A token text as strcmp sees it: up to its first NUL byte."""
    return token.split(b"\0", 1)[0]


def first_failure(target: GGUFInfo, draft: GGUFInfo) -> Rule | None:
    """The rule llama.cpp's check fails on first (it stops there), or None when it accepts the pair."""
    return next((r for r in compatibility(target, draft) if not r.ok), None)


def incompatibility(target: GGUFInfo, draft: GGUFInfo) -> str | None:
    """One line naming the failed rules, or None when the pair is compatible."""
    failed = [f"{r.name} ({r.detail})" for r in compatibility(target, draft) if not r.ok]
    return "; ".join(failed) if failed else None


def check_compatible(target: GGUFInfo, draft: GGUFInfo) -> None:
    """llama.cpp's rules for drafting with these vocabularies; one line naming each failed rule."""
    why = incompatibility(target, draft)
    if why:
        raise IncompatiblePairError(f"{draft.path.name} cannot draft for {target.path.name}: {why}; "
                                    "pick a draft from the same model family (same tokenizer)")


# --- tensor table (what runtimes/repack.py needs), read straight from the header --------------------------

@dataclass(frozen=True)
class TensorInfo:
    name: str
    type_name: str  # ggml type: "Q4_K", "F32", ...
    shape: tuple[int, ...]  # ne[0], ne[1], ... as ggml counts them
    offset: int = 0  # where its data starts, from the start of the data section


@dataclass(frozen=True)
class HeaderLayout:
    """Where the parts of a GGUF header lie (byte positions in the file): what a copy of the header needs."""

    version: int
    n_kv: int
    kv: tuple[int, int]  # the key/value pairs, [start, end)
    infos: tuple[int, int]  # the tensor infos, [start, end)
    alignment: int  # general.alignment, else 32

    @property
    def data_start(self) -> int:
        """The data section: right after the tensor infos, padded to the alignment."""
        return -(-self.infos[1] // self.alignment) * self.alignment


_STRUCT = {"UINT8": "B", "INT8": "b", "UINT16": "H", "INT16": "h", "UINT32": "I", "INT32": "i", "FLOAT32": "f",
           "BOOL": "?", "UINT64": "Q", "INT64": "q", "FLOAT64": "d"}  # gguf.GGUFValueType name -> struct format


class HeaderCutShort(ModelError):
    """The bytes given end before the header does: read more of the file."""


def header_layout(buf, where: str = "the file", keep: frozenset[str] = frozenset()
                  ) -> tuple[dict[str, object], list[TensorInfo], HeaderLayout]:
    """The metadata and tensor table of the first bytes of a GGUF file (enough for its header), and where each part
    of the header lies (models/twin.py copies them). Array values are skipped
    (None in the metadata) except those whose keys are in `keep`: a tuple of their items (strings as bytes)."""
    import struct

    import gguf

    try:
        return _parse_header(buf, where, gguf, struct, keep)
    except (struct.error, IndexError) as exc:
        raise HeaderCutShort(f"{where}: the header goes on past the {len(buf)} bytes read") from exc


def _enum(kind, number: int, where: str, what: str):
    try:
        return kind(number)
    except ValueError:
        raise ModelError(f"{where}: {what} {number} is not one this gguf package knows (a damaged header, or a "
                         "newer GGUF: upgrade the gguf package)") from None


def _parse_header(buf, where: str, gguf, struct, keep: frozenset[str] = frozenset()
                  ) -> tuple[dict[str, object], list[TensorInfo], HeaderLayout]:
    r = _Reader(buf, where, gguf, struct)
    if r.take("4s") != b"GGUF":
        raise ModelError(f"{where} is not a GGUF file (no GGUF magic at its start)")
    version, n_tensors, n_kv = r.take("I"), r.take("Q"), r.take("Q")
    meta, kv_start = {}, r.pos
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.value_type(), key in keep)
    infos_start = r.pos
    tensors = [r.tensor_info() for _ in range(n_tensors)]
    alignment = int(meta.get("general.alignment") or 32)
    return meta, tensors, HeaderLayout(version, n_kv, (kv_start, infos_start), (infos_start, r.pos), alignment)


class _Reader:
    """A cursor over a GGUF header's bytes: little-endian values, length-prefixed strings, typed values and arrays.
    Reading past the end raises struct.error or IndexError (header_layout turns either into HeaderCutShort)."""

    def __init__(self, buf, where: str, gguf, struct):
        self.buf, self.where, self.gguf, self.struct, self.pos = buf, where, gguf, struct, 0

    def take(self, fmt: str):
        values = self.struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += self.struct.calcsize("<" + fmt)
        return values[0] if len(values) == 1 else values

    def string(self) -> str:
        n = self.take("Q")
        self.pos += n
        return bytes(self.buf[self.pos - n:self.pos]).decode("utf-8", "replace")

    def value_type(self):
        return _enum(self.gguf.GGUFValueType, self.take("I"), self.where, "value type")

    def value(self, vtype, kept: bool = False):
        """One value; an array is read whole only when `kept`, else hopped over (None)."""
        kinds = self.gguf.GGUFValueType
        if vtype == kinds.STRING:
            return self.string()
        if vtype != kinds.ARRAY:
            return self.take(_STRUCT[vtype.name])
        itype, n = self.value_type(), self.take("Q")
        if kept:
            return self.array(itype, n)
        if itype.name in _STRUCT:  # skipped whole: a 262k-entry score array costs nothing
            self.pos += n * self.struct.calcsize(_STRUCT[itype.name])
        elif itype == kinds.STRING:  # a vocabulary: hop over each length-prefixed string
            for _ in range(n):
                self.pos += 8 + self.struct.unpack_from("<Q", self.buf, self.pos)[0]
        else:
            for _ in range(n):
                self.value(itype)
        return None

    def array(self, itype, n: int) -> tuple:
        if itype == self.gguf.GGUFValueType.STRING:  # the raw bytes of each string, as llama.cpp keeps them
            out = []
            for _ in range(n):
                size = self.struct.unpack_from("<Q", self.buf, self.pos)[0]
                if self.pos + 8 + size > len(self.buf):
                    raise IndexError(self.pos)
                out.append(bytes(self.buf[self.pos + 8:self.pos + 8 + size]))
                self.pos += 8 + size
            return tuple(out)
        if itype.name in _STRUCT:
            fmt = _STRUCT[itype.name]
            values = self.struct.unpack_from(f"<{n}{fmt}", self.buf, self.pos)
            self.pos += n * self.struct.calcsize(fmt)
            return values
        return tuple(self.value(itype) for _ in range(n))

    def tensor_info(self) -> TensorInfo:
        name, n_dims = self.string(), self.take("I")
        shape = tuple(self.take("Q") for _ in range(n_dims))
        ttype, offset = self.take("I"), self.take("Q")
        type_name = _enum(self.gguf.GGMLQuantizationType, ttype, self.where, f"tensor {name}: ggml type").name
        return TensorInfo(name, type_name, shape, offset)
