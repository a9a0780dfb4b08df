"""A twin of a GGUF model: the real header (architecture, hyperparameters, tokenizer, tensor names, shapes, types and
offsets, byte for byte) with synthetic tensor data. llama.cpp's speed does not depend on the weights' values, so a
twin decodes as fast as the model it copies; it is written from the header alone (a hub file's first megabytes).

The data (docs/twins.md says why):
- most tensors are holes of a sparse file: zeros, which are valid in every ggml type (every block scale 0);
- norm weights are 1 (output_norm: random, so that a tied embedding does not map each token to itself);
- MoE routers (ffn_gate_inp) are random, and so are the token embeddings (all rows for a MoE model, the first
  TOKEN_BAND rows otherwise) and the first TOKEN_BAND rows of an untied output matrix: the hidden state a router
  sees differs from token to token, and generated tokens vary, so a batch of K+1 tokens spreads over experts as a
  real one does;
- random data in a quantized type is written as valid blocks: random quants, and each f16 scale set to one
  finite value chosen so that the weights have the standard deviation asked for.
A key `gguf_bench.twin` (the source's description) marks the file; runtimes/llama_cpp.Model reads it and ignores
end-of-generation tokens, and every record made with the file says `twin`.

An *agreeing* twin (`agree=True`, `gguf-bench twin --agree`) leaves output_norm a hole: zeros, so every logit of
every position is exactly 0, and the loop's argmax (numpy's: the first of equal values) is token 0 everywhere, in a
target and in its draft alike. A pair of agreeing twins accepts every draft: greedy (the same argmax), and sampled
(the same uniform distribution on both sides, which rejection sampling accepts always). Its marker's value starts
with AGREEING; records say `twin_agrees`. For dense models only: a MoE router would see one token at every position.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import shutil
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gguf_bench.errors import ModelError
from gguf_bench.models.files import SPLIT_RE, cache_dir
from gguf_bench.models.gguf import HeaderLayout, TensorInfo
from gguf_bench.models.headers import named_header
from gguf_bench.models.offload_plan import tensor_bytes
from gguf_bench.models.pairs import PairFiles
from gguf_bench.models.parts import ModelHeader, PartHeader, tensor_table
from gguf_bench.models.registry import Named, name_model

MARKER = "gguf_bench.twin"
AGREEING = "agreeing twin (every logit 0: predicts token 0 everywhere; acceptance 1 by construction) of "
EOG_KEYS = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")
TOKEN_BAND = 4096  # embedding/output rows given random data (all rows of a MoE model's embedding)
ROOM_MARGIN = 16 * 2**20  # free space kept beyond what the twin needs
_CHUNK_ROWS = 8192
_STRING = 8  # gguf.GGUFValueType.STRING

# f16 scales in each block type's struct (ggml-common.h): (block bytes, byte offsets of every ggml_half field)
_HALF_SCALES = {
    "Q4_0": (18, (0,)), "Q4_1": (20, (0, 2)), "Q5_0": (22, (0,)), "Q5_1": (24, (0, 2)), "Q8_0": (34, (0,)),
    "Q2_K": (84, (80, 82)), "Q3_K": (110, (108,)), "Q4_K": (144, (0, 2)), "Q5_K": (176, (0, 2)), "Q6_K": (210, (208,)),
    "IQ2_XXS": (66, (0,)), "IQ2_XS": (74, (0,)), "IQ2_S": (82, (0,)), "IQ3_XXS": (98, (0,)), "IQ3_S": (110, (0,)),
    "IQ1_S": (50, (0,)), "IQ4_NL": (18, (0,)), "IQ4_XS": (136, (0,)),
}


@dataclass(frozen=True)
class Written:
    path: Path
    n_tensors: int
    size: int  # logical bytes (st_size)
    on_disk: int  # allocated bytes (st_blocks x 512)
    data_written: int  # bytes of synthetic data actually written (the rest are holes)
    sparse: bool  # the file system keeps holes
    seconds: float


@dataclass(frozen=True)
class Fill:
    """Synthetic data for the first `rows` rows of a tensor: 'ones' or random with standard deviation `std`."""

    tensor: TensorInfo
    rows: int
    kind: str  # "ones" | "random"
    std: float = 1.0


def is_twin(meta: dict) -> bool:
    return MARKER in meta


def is_agreeing(meta: dict) -> bool:
    """Whether the header is an agreeing twin's (its marker says so)."""
    return str(meta.get(MARKER, "")).startswith(AGREEING)


def is_twin_file(path: Path) -> bool:
    """Whether a GGUF file carries the twin marker (False for anything unreadable)."""
    try:
        return is_twin(tensor_table(Path(path))[0])
    except (ModelError, OSError, ValueError):
        return False


def is_agreeing_file(path: Path) -> bool:
    """Whether a GGUF file is an agreeing twin (False for anything unreadable)."""
    try:
        return is_agreeing(tensor_table(Path(path))[0])
    except (ModelError, OSError, ValueError):
        return False


def check_agreeable(meta: dict, tensors: list[TensorInfo], label: str) -> None:
    """One line where an agreeing twin of this header would mislead: a MoE (its routers would see one token at every
    position, so a batch would reach fewer experts than a real one), token 0 an end-of-generation token, or a twin
    already (its marker says what it is; write the agreeing twin from the model's own header)."""
    if is_twin(meta) and not is_agreeing(meta):
        raise ModelError(f"{label} is a twin already: write the agreeing twin from the model's own header")
    if any(t.name.endswith(".ffn_gate_inp.weight") for t in tensors):
        raise ModelError(f"{label} is a mixture of experts: an agreeing twin predicts one token everywhere, so its "
                         f"routers would send every position to the same experts and its speed would not be the "
                         f"model's; agreeing twins are for dense models (write a plain twin without --agree)")
    eog = [k.rsplit(".", 1)[1] for k in EOG_KEYS if meta.get(k) == 0]
    if eog:
        raise ModelError(f"{label}'s tokenizer makes token 0 end-of-generation ({', '.join(eog)}), and an agreeing "
                         f"twin predicts token 0 everywhere: its generations would be end tokens only; write a plain "
                         f"twin without --agree")


# --- which tensors get data ---------------------------------------------------------------------------------------


def fills(meta: dict, tensors: list[TensorInfo], agree: bool = False) -> list[Fill]:
    """The tensors (and rows) that get data; every other byte stays a hole (zeros). agree: output_norm stays a hole
    too (every logit 0: an agreeing twin)."""
    names = {t.name for t in tensors}
    moe = any(n.endswith(".ffn_gate_inp.weight") for n in names)
    out = []
    for t in tensors:
        cols, rows = t.shape[0], math.prod(t.shape[1:])
        if t.name == "output_norm.weight":
            if agree:
                continue  # zeros: the last hidden state is 0, so is every logit (no NaN: the norm's input is not 0)
            out.append(Fill(t, rows, "random"))  # a tied embedding would otherwise map each token to itself
        elif t.name.endswith("norm.weight"):
            out.append(Fill(t, rows, "ones"))
        elif t.name.endswith(".ffn_gate_inp.weight"):
            out.append(Fill(t, rows, "random", 1 / math.sqrt(cols)))  # router logits of unit spread
        elif t.name == "token_embd.weight":
            out.append(Fill(t, rows if moe else min(rows, TOKEN_BAND), "random"))
        elif t.name == "output.weight":
            out.append(Fill(t, min(rows, TOKEN_BAND), "random", 4 / math.sqrt(cols)))  # logits of spread 4
    return out


# --- the data ------------------------------------------------------------------------------------------------------


def row_bytes(type_name: str, cols: int) -> int:
    return tensor_bytes(type_name, (cols,))


def synthetic_rows(fill: Fill, start: int, n: int, rng: np.random.Generator) -> bytes:
    """Rows [start, start + n) of `fill` in its tensor's ggml type, every value finite."""
    t, cols = fill.tensor, fill.tensor.shape[0]
    if fill.kind == "ones":
        values = np.ones((n, cols), np.float32)
    else:
        values = rng.standard_normal((n, cols), dtype=np.float32) * np.float32(fill.std)
    if t.type_name == "F32":
        return values.astype("<f4").tobytes()
    if t.type_name == "F16":
        return values.astype("<f2").tobytes()
    if t.type_name == "BF16":
        return (values.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
    if fill.kind == "random" and t.type_name in _HALF_SCALES:
        return _random_blocks(t.type_name, n * row_bytes(t.type_name, cols), fill.std, rng)
    raise ModelError(f"the twin writer cannot write {fill.kind} data of ggml type {t.type_name} "
                     f"(tensor {t.name}); types it writes: F32, F16, BF16, {', '.join(_HALF_SCALES)}")


def _random_blocks(type_name: str, nbytes: int, std: float, rng: np.random.Generator) -> bytes:
    """Blocks of random quants with every f16 scale set to the one value that gives weights of deviation `std`."""
    size, halves = _HALF_SCALES[type_name]
    blocks = rng.integers(0, 256, (nbytes // size, size), dtype=np.uint8)
    scale = np.float16(std / _spread(type_name))
    for off in halves:
        blocks[:, off:off + 2] = np.frombuffer(scale.astype("<f2").tobytes(), np.uint8)
    return blocks.tobytes()


_spreads: dict[str, float] = {}


def _spread(type_name: str) -> float:
    """Standard deviation of random blocks of `type_name` with scales 1 (dequantized by the gguf package)."""
    if type_name not in _spreads:
        import gguf

        size, halves = _HALF_SCALES[type_name]
        qtype = gguf.GGMLQuantizationType[type_name]
        block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
        assert block_bytes == size, (type_name, block_bytes, size)
        blocks = np.random.default_rng(0).integers(0, 256, (64, size), dtype=np.uint8)
        for off in halves:
            blocks[:, off:off + 2] = np.frombuffer(np.float16(1).astype("<f2").tobytes(), np.uint8)
        values = gguf.quants.dequantize(blocks.reshape(1, -1), qtype)
        if not np.isfinite(values).all() or not values.std() > 0:
            raise ModelError(f"random {type_name} blocks dequantize to non-finite or constant values")
        _spreads[type_name] = float(values.std())
    return _spreads[type_name]


# --- the file ------------------------------------------------------------------------------------------------------


def twin_header(prefix, layout: HeaderLayout, marker: str | None) -> bytes:
    """The source header, byte for byte, with one more key (the marker) after its own; padded to the alignment.
    Tensor offsets count from the data section, so they stay as they are."""
    n_kv = layout.n_kv + (marker is not None)
    n_tensors = struct.unpack_from("<Q", prefix, 8)[0]
    out = bytearray(b"GGUF" + struct.pack("<IQQ", layout.version, n_tensors, n_kv))
    out += prefix[layout.kv[0]:layout.kv[1]]
    if marker is not None:
        key, value = MARKER.encode(), marker.encode()
        out += struct.pack("<Q", len(key)) + key + struct.pack("<IQ", _STRING, len(value)) + value
    out += prefix[layout.infos[0]:layout.infos[1]]
    out += bytes(-len(out) % layout.alignment)
    return bytes(out)


def data_size(tensors: list[TensorInfo], alignment: int) -> int:
    """The data section as a GGUF writer lays it out: each tensor at its offset, the end padded to the alignment."""
    end = max((t.offset + tensor_bytes(t.type_name, t.shape) for t in tensors), default=0)
    return -(-end // alignment) * alignment


def twin_paths(header: ModelHeader, out: Path) -> list[Path]:
    """Where each part's twin goes: `out` for one file; for a split model, `out` with llama.cpp's part suffix
    (OUT-00001-of-0000N.gguf, the name llama.cpp finds the other parts by), from the path given or any part's name."""
    n = len(header.parts)
    if n == 1:
        return [out]
    stem = out.name.removesuffix(".gguf")
    if (m := SPLIT_RE.match(out.name)) and int(m["n"]) == n:
        stem = m["stem"]
    return [out.with_name(f"{stem}-{i:05d}-of-{n:05d}.gguf") for i in range(1, n + 1)]


def write_twin(header: ModelHeader, out: Path, source: str, seed: int = 0, agree: bool = False) -> Written:
    """Write the twin of the model whose header is `header` to `out` (a split model: one twin per part, named as
    twin_paths says; `path` is the first). Each file goes through a temporary file in the target folder, renamed at
    the end; when any part fails, no part is left behind. agree: an agreeing twin (every logit 0: token 0 everywhere),
    for dense models whose token 0 is not an end-of-generation token (check_agreeable)."""
    started = time.perf_counter()
    if agree:
        check_agreeable(header.meta, list(header.tensors), source)
    elif is_agreeing(header.meta):  # its marker would say 'agreeing' over a plain twin's data
        raise ModelError(f"{source} is an agreeing twin: write a plain twin from the model's own header")
    out = Path(out)
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise ModelError(f"cannot write the twin: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ModelError(f"cannot write the twin into {folder}: permission denied; give -o in a folder you can write")
    plans = [(part, fills(part.meta, list(part.tensors), agree)) for part in header.parts]
    for _part, plan in plans:  # every type is checked before a byte is written
        for f in plan:
            synthetic_rows(f, 0, 1, np.random.default_rng(seed))
    paths, done = twin_paths(header, out), []
    try:
        sparse = supports_holes(folder)
        check_room(folder, sum(_room(part, plan, sparse) for part, plan in plans), shutil.disk_usage(folder).free, sparse)
        for (part, plan), path in zip(plans, paths):
            marker = None if is_twin(header.meta) else (AGREEING if agree else "") + source
            _write_part(part, plan, path, marker, seed)
            done.append(path)
    except BaseException as exc:
        for path in done:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if isinstance(exc, OSError):
            why = "the disk is full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
            raise ModelError(f"cannot write the twin {out}: {why}; nothing was left behind") from None
        raise
    stats = [p.stat() for p in paths]
    return Written(paths[0], len(header.tensors), sum(st.st_size for st in stats), sum(st.st_blocks * 512 for st in stats),
                   sum(_written(plan) for _part, plan in plans), sparse, time.perf_counter() - started)


def _written(plan: list[Fill]) -> int:
    return sum(f.rows * row_bytes(f.tensor.type_name, f.tensor.shape[0]) for f in plan)


def _room(part: PartHeader, plan: list[Fill], sparse: bool) -> int:
    """Bytes one part's twin takes on disk: its header and written data where holes are kept, else its whole size."""
    header = part.layout.data_start + len(MARKER) + 256  # the header and the marker key
    return header + (_written(plan) if sparse else data_size(list(part.tensors), part.layout.alignment))


def _write_part(part: PartHeader, plan: list[Fill], out: Path, marker: str | None, seed: int) -> None:
    """One part's twin at `out`, through a temporary file in its folder (removed when anything fails)."""
    header = twin_header(part.prefix, part.layout, marker)
    total = len(header) + data_size(list(part.tensors), part.layout.alignment)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(header)
            _write_data(fh, len(header), plan, np.random.default_rng(seed))
            fh.truncate(total)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # as a file opened the ordinary way (mkstemp makes it 0600)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_data(fh, data_start: int, plan: list[Fill], rng: np.random.Generator) -> None:
    for f in plan:
        step = row_bytes(f.tensor.type_name, f.tensor.shape[0])
        for start in range(0, f.rows, _CHUNK_ROWS):
            fh.seek(data_start + f.tensor.offset + start * step)
            fh.write(synthetic_rows(f, start, min(_CHUNK_ROWS, f.rows - start), rng))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def supports_holes(folder: Path) -> bool:
    """Whether files in `folder` keep holes: a 4 MiB file extended by truncate holds (almost) no blocks."""
    fd, probe = tempfile.mkstemp(prefix=".twin-sparse-probe.", dir=folder)
    try:
        os.ftruncate(fd, 4 * 2**20)
        return os.fstat(fd).st_blocks * 512 < 2**20
    except OSError:
        return False
    finally:
        os.close(fd)
        os.unlink(probe)


def check_room(folder: Path, need: int, free: int, sparse: bool) -> None:
    """One line when `need` bytes (the whole file where holes are not kept) do not fit the `free` ones."""
    if need + ROOM_MARGIN > free:
        what = "its written data" if sparse else "its whole size (this file system does not keep sparse files)"
        raise ModelError(f"no room for the twin in {folder}: it needs {need / 2**20:,.0f} MiB ({what}) and "
                         f"{free / 2**20:,.0f} MiB are free")


def twin_of(source: str, folder: Path, registry: Path | None = None, agree: bool = False) -> Path:
    """A twin of SOURCE (a GGUF file, a registry model, or a hub file: headers.named_header reads its header only)
    written into `folder`, named after the source; agree: an agreeing twin."""
    return named_twin(name_model(source, registry), folder, agree)


def named_twin(named: Named, folder: Path, agree: bool = False) -> Path:
    """twin_of for a model whose name is resolved already."""
    header = named_header(named)
    name = re.sub(r"[^\w.-]+", "_", Path(named.name).name if named.path else named.name).removesuffix(".gguf")
    if m := SPLIT_RE.match(f"{name}.gguf"):
        name = m["stem"]
    return write_twin(header, folder / f"{name[-100:]}.twin.gguf", header.label, agree=agree).path


def twin_folder(prefix: str = "twins-") -> tempfile.TemporaryDirectory:
    """A temporary folder for twins under the cache, deleted on every way out; not in /tmp: a twin read through tmpfs
    would fill memory with its holes (llama.cpp maps the file shared), where on disk they are page cache."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(prefix=prefix, dir=root)


def twin_pair(pair: tuple[str, str, str], folder: Path, registry: Path | None = None, agree: bool = False) -> PairFiles:
    """Twins of a pair's target and draft (pairs.header_sources: name, target source, draft source) under `folder`
    (target/ and draft/: a pair of one model twice has two files), the pair named '<pair> twin' ('<pair> agreeing
    twin' with agree), apart from the real pair's records."""
    name, *sources = pair
    paths = []
    for role, source in zip(("target", "draft"), sources):
        (folder / role).mkdir()
        paths.append(twin_of(source, folder / role, registry, agree))
    return PairFiles(paths[0], paths[1], f"{name} {'agreeing twin' if agree else 'twin'}")
