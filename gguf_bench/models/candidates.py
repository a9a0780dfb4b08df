"""Every draft that could serve a target, found where users keep or find drafts, each judged from its GGUF header
alone by llama.cpp's own rule (gguf.first_failure) before anything is downloaded.

Where candidates come from (`Source` names each): the registry's drafts; local GGUF files (--search folders, the
Hugging Face cache, llama.cpp's download cache, LM Studio's models folder: each only if present); the hub: GGUF
repositories of the target's family with a smaller size label (searched by the target's general.* metadata), one or two
quants each; lower quants of the target's own hub repository; sidecars (EAGLE-3, DFlash, DSpark) of the target, checked
for their architecture; and what needs no draft file (the target's MTP heads, the n-gram types).

Hub headers are read by range requests that go on where the last one stopped, doubling, until the header ends (the
vocabulary sits in the first megabytes). What a header says is cached under the cache folder: a summary per file (hub
files by repository commit, local files by path, size and mtime) and each distinct tokens array once, by its hash;
a second run reads no header again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import zlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gguf_bench.errors import BenchError, ModelError, RegistryError
from gguf_bench.models.download import hub_error_message, locate
from gguf_bench.models.files import SPLIT_RE, cache_dir, read_json, write_json
from gguf_bench.models.gguf import GGUFInfo, Rule, first_failure, total_size, trunk_layers
from gguf_bench.models.headers import HubReader, ReadStats
from gguf_bench.models.heads import mtp_heads, sidecar_mismatch
from gguf_bench.models.offload_plan import Shape, Weight, tensor_bytes
from gguf_bench.models.parts import ModelHeader, local_header, model_path, part_paths
from gguf_bench.models.registry import HubSource, Named, load_registry, name_model
from gguf_bench.models.vocab import TOKENS_KEY, info_from_header

# the cached Header's form and rules (3: models/heads' MTP rule; 4: the planner's shape keeps a hybrid's recurrent
# blocks and the MTP blocks' count): other entries are read again
HEADER_SCHEMA = 4
DEFAULT_QUANTS = ("Q8_0", "Q4_K_M")
SELF_QUANTS = 3  # lower quants of the target's own repository, at most
NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
SIDECAR_WORDS = ("eagle", "dflash", "dspark")
# quants from the most to the least bits per weight: what "a lower quant" of the target's repository means
QUANT_ORDER = ("F32", "BF16", "F16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_1", "Q5_0", "Q4_K_M", "Q4_K_S", "Q4_1",
               "IQ4_NL", "Q4_0", "IQ4_XS", "Q3_K_L", "Q3_K_M", "IQ3_M", "Q3_K_S", "IQ3_S", "IQ3_XS", "IQ3_XXS", "Q2_K_L",
               "Q2_K", "Q2_K_S", "IQ2_M", "IQ2_S", "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S")
_SIZE = re.compile(r"(?:^|[-_ x./])(\d+(?:\.\d+)?)([KMBT])(?=$|[-_ .])", re.IGNORECASE)
_UNITS = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


# --- what a header says, cached -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Header:
    """What `drafts` needs of one GGUF header: JSON-cacheable; the tokens live in the vocabulary store by hash."""

    label: str  # where it was read: a path, or REPO/FILE
    meta: dict  # the scalar metadata (general.*, the architecture's keys, tokenizer ids and flags)
    shape: dict | None  # memory.Shape's fields (None: not a model the planner knows)
    vocab: dict | None  # GGUFInfo's vocabulary fields, tokens replaced by tokens_sha (None: no vocabulary)
    n_params: int
    active_params: int  # a MoE's parameters a token uses (its routed share of the experts)
    bytes_per_token: int  # weights read per decoded token: all but the embedding table, experts by their routed share
    file_size: int
    mtp: bool  # the target's own MTP/NextN heads (llama.cpp's draft-mtp detection)
    sidecar: str | None  # draft-eagle3 / draft-dflash / draft-dspark by architecture and tensors, else None
    n_parts: int = 1  # files of a split GGUF (file_size and the tensors count them all)

    @property
    def architecture(self) -> str:
        return str(self.meta.get("general.architecture", "unknown"))

    def planner_shape(self) -> Shape | None:
        """The planner's Shape back from its cached form (dataclasses.asdict: lists, and each Weight as a dict)."""
        if not self.shape:
            return None
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in self.shape.items()}
        fields["weights"] = tuple(Weight(**w) for w in fields.get("weights", ()))
        return Shape(**fields)


class VocabStore:
    """Tokens arrays by the sha256 of their content: each distinct vocabulary kept once, zlib-compressed."""

    def __init__(self, folder: Path | None = None):
        self.folder = folder or cache_dir() / "drafts" / "vocab"
        self._loaded: dict[str, tuple[bytes, ...]] = {}

    @staticmethod
    def encode(tokens: Iterable[bytes]) -> bytes:
        return b"".join(struct.pack("<I", len(t)) + t for t in tokens)

    def put(self, tokens: tuple[bytes, ...]) -> str:
        blob = self.encode(tokens)
        sha = hashlib.sha256(blob).hexdigest()
        path = self.folder / f"{sha}.zlib"
        if not path.exists():
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(zlib.compress(blob, 6))
            os.replace(tmp, path)
        self._loaded[sha] = tokens
        return sha

    def get(self, sha: str) -> tuple[bytes, ...] | None:
        if sha in self._loaded:
            return self._loaded[sha]
        try:
            blob = zlib.decompress((self.folder / f"{sha}.zlib").read_bytes())
        except (OSError, zlib.error):
            return None
        out, pos = [], 0
        while pos < len(blob):
            n = struct.unpack_from("<I", blob, pos)[0]
            out.append(blob[pos + 4:pos + 4 + n])
            pos += 4 + n
        self._loaded[sha] = tuple(out)
        return self._loaded[sha]


class HeaderReader:
    """Headers of local and hub files, through the cache; counts what it reads."""

    def __init__(self, store: VocabStore | None = None, use_cache: bool = True):
        self.store = store or VocabStore()
        self.folder = self.store.folder.parent / "headers"
        self.use_cache = use_cache
        self.stats = ReadStats()
        self.hub_reader = HubReader(self.stats)

    def local(self, path: Path) -> Header:
        """The header of the model in `path` (any part of a split model: every part is read), cached by the parts'
        paths, sizes and modification times."""
        paths = part_paths(model_path(Path(path)))
        key = "file:" + ";".join(f"{p.resolve()}:{(st := p.stat()).st_size}:{st.st_mtime_ns}" for p in paths)
        if (got := self._cached(key)) is not None:
            return got
        return self._store(key, self._parse(local_header(paths[0], frozenset({TOKENS_KEY}))))

    def hub(self, repo: str, name: str, revision: str | None = None, commit: str | None = None) -> Header:
        """The header of REPO/NAME on the hub (every part of a split model). With the repository's commit it is cached
        (a commit never changes)."""
        key = f"hub:{repo}@{commit}/{name}" if commit else None
        if key and (got := self._cached(key)) is not None:
            return got
        header = self._parse(self.hub_reader.header(repo, name, revision or commit, frozenset({TOKENS_KEY})))
        return self._store(key, header) if key else header

    def _parse(self, model: ModelHeader) -> Header:
        meta, tensors = model.table()
        self.stats.headers_read += len(model.parts)
        vocab = None
        if meta.get("tokenizer.ggml.model") is not None:
            info = info_from_header(meta, tensors, model.label, model.size)
            vocab = {k: getattr(info, k) for k in ("vocab_type", "n_vocab", "bos_id", "eos_id", "add_bos", "add_eos")}
            vocab["tokens_sha"] = self.store.put(info.tokens)
        scalars = {k: v for k, v in meta.items() if v is not None and k != TOKENS_KEY and
                   not (isinstance(v, str) and len(v) > 512)}  # chat templates stay out of the cache
        return Header(model.label, scalars, _shape(meta, tensors), vocab, *_params(meta, tensors), model.size,
                      _has_mtp(meta, tensors), _sidecar(meta, tensors), len(model.parts))

    def _cached(self, key: str) -> Header | None:
        if not self.use_cache:
            return None
        raw = read_json(self.folder / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json")
        if raw.get("key") != key or raw.get("schema") != HEADER_SCHEMA:
            return None  # another file's, or written by another version of gguf-bench: read the header again
        try:
            header = Header(**raw["header"])
        except TypeError:  # a damaged entry
            return None
        if header.vocab and self.store.get(header.vocab["tokens_sha"]) is None:
            return None  # its vocabulary was removed: read it again
        self.stats.cached += 1
        return header

    def _store(self, key: str, header: Header) -> Header:
        write_json(self.folder / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json",
                   {"key": key, "schema": HEADER_SCHEMA, "header": asdict(header)})
        return header

    def info(self, header: Header) -> GGUFInfo:
        """The GGUFInfo llama.cpp's check reads, rebuilt from a header and its stored tokens."""
        v = dict(header.vocab)
        tokens = self.store.get(v.pop("tokens_sha"))
        if tokens is None:
            raise ModelError(f"{header.label}: its vocabulary is no longer in the cache ({self.store.folder})")
        arch = header.architecture
        return GGUFInfo(path=Path(header.label), architecture=arch, name=str(header.meta.get("general.name", "")),
                        n_layers=trunk_layers(header.meta), quant="", file_size=header.file_size,
                        context_length=None, tokens=tokens, **v)


def _shape(meta: dict, tensors: list) -> dict | None:
    try:
        return asdict(Shape.from_header(meta, tensors)) if tensors else None
    except (ValueError, KeyError, ZeroDivisionError, TypeError):
        return None


def _params(meta: dict, tensors: list) -> tuple[int, int, int]:
    """(parameters, active parameters, bytes read per token): experts count at n_used / n_expert."""
    import math

    arch = meta.get("general.architecture")
    n_exp, n_used = meta.get(f"{arch}.expert_count") or 0, meta.get(f"{arch}.expert_used_count") or 0
    share = n_used / n_exp if n_exp and n_used else 1.0
    total = active = per_token = 0
    for t in tensors:
        n = math.prod(t.shape)
        routed = share if "_exps" in t.name else 1.0
        total += n
        active += int(n * routed)
        if not t.name.startswith("token_embd"):  # one row of the embedding table is read per token
            per_token += int(tensor_bytes(t.type_name, t.shape) * routed)
    return total, active, per_token


def _has_mtp(meta: dict, tensors: list) -> bool:
    """llama.cpp's draft-mtp detection (models/heads.py, the rule the server engine checks too)."""
    return mtp_heads(meta, (t.name for t in tensors)) > 0


def _sidecar(meta: dict, tensors: list) -> str | None:
    """llama.cpp's reading of a sidecar draft: architecture eagle3, or dflash (draft-dspark with a Markov head)."""
    arch = meta.get("general.architecture")
    if arch == "eagle3":
        return "draft-eagle3"
    if arch == "dflash":
        return "draft-dspark" if any(t.name == "markov_w1.weight" for t in tensors) else "draft-dflash"
    return None


# --- candidates -------------------------------------------------------------------------------------------------


@dataclass
class Candidate:
    name: str  # how to name it to gguf-bench and llama.cpp: a path, a registry model, REPO:QUANT or REPO/FILE.gguf
    origin: str  # where it was found: registry, search, hf-cache, llama.cpp, lm-studio, hub, self, sidecar, target
    kind: str  # llama-server's type: draft-simple, draft-eagle3, draft-dflash, draft-dspark, draft-mtp, ngram-*
    header: Header | None = None
    status: str = "unchecked"  # compatible, incompatible, unreadable, unchecked (needs no file)
    reason: str = ""  # the first failing condition, why it is unreadable, or a note
    named: Named | None = None  # what `name` is, known where it was found (the target's: resolve_target, at the
    # command); a draft's twin and download take it, never the name again. None: no file (MTP heads, n-gram types)

    @property
    def needs_file(self) -> bool:
        return self.kind not in NGRAM_TYPES and self.kind != "draft-mtp"


@dataclass
class Search:
    """What `find` looked at: candidates, the local places searched, and a hub error (None: reached or not asked)."""

    target: Candidate
    candidates: list[Candidate]
    searched: list[str] = field(default_factory=list)
    hub_error: str | None = None
    hub_repos: int = 0  # hub repositories considered


@dataclass(frozen=True)
class Options:
    search: tuple[Path, ...] = ()
    quants: tuple[str, ...] = DEFAULT_QUANTS
    hub: bool = True
    local_caches: bool = True  # the HF cache, llama.cpp's cache and LM Studio's folder
    max_repos: int = 40
    registry: Path | None = None
    registry_drafts: bool = True  # False: the registry names the target only (a script's fixed candidate set)


def size_of(text: str) -> float | None:
    """Parameters a size label names ('7B', '270m', '0.5B', '8x7B': 7e9 per expert), else None."""
    m = _SIZE.search(text or "")
    return float(m[1]) * _UNITS[m[2].lower()] if m else None


def quant_of(filename: str) -> str | None:
    """The quant a file name names (the longest of QUANT_ORDER found in it), else None."""
    up = filename.upper()
    found = [q for q in QUANT_ORDER if re.search(rf"(?<![A-Z0-9]){re.escape(q)}(?![A-Z0-9_])", up)]
    return max(found, key=len) if found else None


def local_places(options: Options) -> list[tuple[str, Path]]:
    """(origin, folder) for each local place searched, in order: --search, then the caches that exist."""
    places = [("search", Path(p)) for p in options.search]
    if options.local_caches:
        from huggingface_hub import constants

        home = Path.home()
        llama_cache = os.environ.get("LLAMA_CACHE")
        for origin, folder in (("hf-cache", Path(constants.HF_HUB_CACHE)),
                               ("llama.cpp", Path(llama_cache) if llama_cache else home / ".cache" / "llama.cpp"),
                               ("llama.cpp", home / "Library" / "Caches" / "llama.cpp"),
                               ("lm-studio", home / ".lmstudio" / "models"),
                               ("lm-studio", home / ".cache" / "lm-studio" / "models")):
            if folder.is_dir():
                places.append((origin, folder))
    return places


def gguf_files(folder: Path) -> list[Path]:
    """GGUF models under `folder` (the first part of split files; no mmproj projectors), by name."""
    out = []
    for p in sorted(folder.rglob("*.gguf")):
        if "mmproj" in p.name.lower() or ((m := SPLIT_RE.match(p.name)) and int(m["i"]) != 1):
            continue
        if p.is_file():
            out.append(p)
    return out


def resolve_target(source: str, registry: Path | None = None) -> Named:
    """The target named as everywhere (a path, a registry model, a hub file), resolved once for every later question
    (its header, the hub search's repository, its twin, its download); one line when it names no model."""
    try:
        return name_model(source, registry)
    except RegistryError:
        raise BenchError(f"{source} not found: not a file, not a registry model, and not a hub file "
                         "(REPO:QUANT or REPO/FILE.gguf)") from None


def read_target(target: Named, reader: HeaderReader) -> Candidate:
    """The target as a candidate, with its header (read through `reader`); one line when no draft can serve it."""
    c = Candidate(target.name, "target", "target", named=target)
    c.header = _read_named(target, reader)
    if c.header.vocab is None:
        raise BenchError(f"target {target.name} has no vocabulary in its header: not a model a draft can serve")
    c.status = "target"
    return c


def _read_named(named: Named, reader: HeaderReader) -> Header:
    """The header of a resolved model: its file, its registry model's cached file, else its hub file."""
    if named.path is not None:
        return reader.local(named.path)
    if named.ref is not None:
        if path := locate(named.ref, named.registry):
            return reader.local(path)
        if not isinstance(named.ref.source, HubSource):
            raise ModelError(f"registry model {named.name} is not downloaded yet ({named.ref.source.label}): run "
                             "`gguf-bench download` for its pair")
        return _hub_header(named.ref.source, reader)
    return _hub_header(named.hub, reader)


def _hub_header(src: HubSource, reader: HeaderReader) -> Header:
    """A hub file's header; the repository's commit (one API call) makes it cacheable."""
    from huggingface_hub import HfApi

    from gguf_bench.models.download import pick_file

    try:
        info = HfApi().model_info(src.repo, revision=src.revision)
    except Exception as exc:  # unreachable, gated, missing: one line, as a download says it
        raise ModelError(hub_error_message(src, src.file or src.pattern, exc)) from None
    name = src.file or pick_file(src, [s.rfilename for s in info.siblings or []])
    return reader.hub(src.repo, name, src.revision, info.sha)


def find(named: Named, options: Options, reader: HeaderReader) -> Search:
    """Every candidate for the target (resolved once: resolve_target), each with its verdict from headers (read
    through `reader`)."""
    target = read_target(named, reader)
    t_info = reader.info(target.header)
    search = Search(target, [])
    seen: set[str] = {_identity(named.name, target.header)}
    add = _adder(search, seen, reader, t_info)
    _registry_candidates(options, reader, add, search)
    for origin, folder in local_places(options):
        search.searched.append(f"{origin} {folder}")
        for path in gguf_files(folder):
            add(Candidate(str(path), origin, "draft-simple", named=Named(str(path), path=path)),
                lambda p=path: reader.local(p), local_size=total_size(path))
    if options.hub:
        _hub_candidates(options, reader, add, search)
    if target.header.mtp:
        search.candidates.append(Candidate(named.name, "target", "draft-mtp", status="unchecked",
                                           reason="the target's own MTP (NextN) heads: no draft file"))
    for t in NGRAM_TYPES:
        search.candidates.append(Candidate("-", "none", t, status="unchecked",
                                           reason="drafts from the text itself: acceptance depends on the workload"))
    return search


def _identity(name: str, header: Header | None) -> str:
    label = header.label if header else name
    return str(Path(label).resolve()) if Path(label).is_file() else label


def _adder(search: Search, seen: set[str], reader: HeaderReader, t_info: GGUFInfo):
    target_size = search.target.header.file_size

    def add(c: Candidate, read, local_size: int | None = None) -> None:
        """Read c's header (errors make it unreadable), judge it, and keep it unless already seen or not smaller."""
        if local_size is not None and local_size > target_size:
            return  # a local file larger than the target: not a draft for it
        try:
            c.header = read()
        except (BenchError, OSError) as exc:
            c.status, c.reason = "unreadable", str(exc)
            if c.name not in seen:
                seen.add(c.name)
                search.candidates.append(c)
            return
        key = _identity(c.name, c.header)
        if key in seen:
            return
        seen.add(key)
        judge(c, t_info, reader, search.target.header.meta)
        search.candidates.append(c)

    return add


def judge(c: Candidate, t_info: GGUFInfo, reader: HeaderReader, target_meta: dict | None = None) -> None:
    """c's verdict: llama.cpp's first failing condition for a draft model; for a sidecar, whether it was made for this
    target (hidden size, vocabulary: heads.sidecar_mismatch)."""
    h = c.header
    if h.sidecar:
        c.kind, c.status = h.sidecar, "compatible"
        c.reason = f"sidecar (architecture {h.architecture}): made for this target (hidden size, vocabulary; llama.cpp checks neither)"
        why = sidecar_mismatch(h.meta, target_meta or {}, (h.vocab or {}).get("n_vocab"), t_info.n_vocab)
        if why:
            c.status, c.reason = "incompatible", f"sidecar (architecture {h.architecture}) for another target: {why}"
        return
    if c.kind != "draft-simple":  # found as a sidecar by its name, but its header says otherwise
        c.status, c.reason = "incompatible", f"not a sidecar: architecture {h.architecture}"
        return
    if h.vocab is None:
        c.status, c.reason = "incompatible", f"no vocabulary in its header (architecture {h.architecture})"
        return
    rule: Rule | None = first_failure(t_info, reader.info(h))
    c.status, c.reason = ("compatible", "") if rule is None else ("incompatible", f"{rule.name}: {rule.detail}")


def _registry_candidates(options: Options, reader: HeaderReader, add, search: Search) -> None:
    """The registry's drafts: each one already fetched; those on the hub when their name holds the target's family
    (and the hub is searched); the rest are noted as not fetched (a download makes their header readable)."""
    if not options.registry_drafts:
        return
    try:
        reg = load_registry(options.registry)
    except RegistryError:
        return
    search.searched.append(f"registry {reg.path}")
    family = [q.lower() for q in family_queries(search.target.header.meta, search.target.named.hub)]
    for name in dict.fromkeys(p.draft.name for p in reg.pairs.values()):
        ref = reg.models[name]
        path = locate(ref, reg)
        if name == search.target.name:
            continue
        named = Named(name, ref=ref, registry=reg)
        if path is not None:
            add(Candidate(name, "registry", "draft-simple", named=named), lambda p=path: reader.local(p))
        elif not any(f and f in name.lower() for f in family):
            continue
        elif isinstance(ref.source, HubSource) and options.hub:
            add(Candidate(name, "registry", "draft-simple", named=named), lambda s=ref.source: _hub_header(s, reader))
        else:
            search.candidates.append(Candidate(name, "registry", "draft-simple", status="unfetched",
                                               reason=f"not fetched ({ref.source.label})"))


# --- the hub ------------------------------------------------------------------------------------------------------


def family_queries(meta: dict, target_hub: HubSource | None = None) -> list[str]:
    """What to search the hub for: the target's base name (else its name without size and fine-tune), and the base
    model's name the same way."""
    out = []
    for key in ("general.basename", "general.base_model.0.name", "general.name"):
        value = meta.get(key)
        if not value:
            continue
        text = _SIZE.sub("", str(value)).strip("-_ ")
        for word in ("Instruct", "instruct", "-it", "Chat", "chat", "GGUF"):
            text = text.replace(word, "").strip("-_ ")
        if text and text not in out:
            out.append(text)
        if key == "general.basename":
            break
    if not out and (hub := target_hub):
        out.append(_SIZE.sub("", hub.repo.split("/")[1]).replace("GGUF", "").strip("-_ "))
    return out


def _hub_candidates(options: Options, reader: HeaderReader, add, search: Search) -> None:
    from huggingface_hub import HfApi

    target, t_header = search.target, search.target.header
    meta = t_header.meta
    t_hub = target.named.hub
    t_repo = t_hub.repo if t_hub else None
    t_size = size_of(str(meta.get("general.size_label") or "")) or size_of(target.name) or float(t_header.n_params)
    from huggingface_hub.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # its retry warnings would bury our lines
    api = HfApi()
    repos: dict[str, object] = {}
    try:
        _probe()  # an unreachable hub fails here at once, not after list_models' retries (half a minute)
        for q in family_queries(meta, t_hub):
            for m in api.list_models(search=q, filter="gguf", expand=["siblings", "sha"], limit=options.max_repos * 2):
                repos.setdefault(m.id, m)
        if t_repo and t_repo not in repos:
            repos[t_repo] = api.model_info(t_repo, revision=t_hub.revision)
    except Exception as exc:  # unreachable, offline, refused: the local candidates still stand
        from huggingface_hub import constants

        search.hub_error = (f"the hub ({constants.ENDPOINT}) could not be searched: {type(exc).__name__}: "
                            f"{str(exc).splitlines()[0] if str(exc) else ''}")
        return
    search.searched.append("hub")
    kept = 0
    for repo_id, m in repos.items():
        files = [s.rfilename for s in (m.siblings or []) if s.rfilename.lower().endswith(".gguf")
                 and "mmproj" not in s.rfilename.lower()
                 and not ((sm := SPLIT_RE.match(s.rfilename)) and int(sm["i"]) != 1)]
        if not files:
            continue
        commit = getattr(m, "sha", None)
        if repo_id == t_repo:
            for name in _self_quants(files, t_header, options.quants):
                spelled = f"{repo_id}:{quant_of(name)}"
                hub = HubSource(repo_id, name, revision=t_hub.revision)  # the very file judged, at the target's revision
                add(Candidate(spelled, "self", "draft-simple", named=Named(spelled, hub=hub)),
                    lambda r=repo_id, n=name, c=commit: reader.hub(r, n, t_hub.revision, c))
            continue
        if kept >= options.max_repos:
            break
        sidecar = any(w in repo_id.lower() for w in SIDECAR_WORDS)
        size = size_of(repo_id.split("/")[1])
        if not sidecar and (size is None or size >= t_size):
            continue
        kept += 1
        for name in (files[:1] if sidecar else _pick_quants(files, options.quants)):
            spelled = _spelling(repo_id, name, files)
            add(Candidate(spelled, "sidecar" if sidecar else "hub", "sidecar" if sidecar else "draft-simple",
                          named=Named(spelled, hub=HubSource(repo_id, name))),
                lambda r=repo_id, n=name, c=commit: reader.hub(r, n, None, c))
    search.hub_repos = kept


def _probe() -> None:
    """One request to the hub's address, without retries: raises when nothing answers there."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    get_session().head(constants.ENDPOINT, timeout=10)


def _pick_quants(files: list[str], quants: tuple[str, ...]) -> list[str]:
    """One file per quant asked for (its first match); the first GGUF file when none matches."""
    picked = [next((f for f in sorted(files) if quant_of(f) == q.upper()), None) for q in quants]
    picked = list(dict.fromkeys(f for f in picked if f))
    return picked or sorted(files)[:1]


def _self_quants(files: list[str], t_header: Header, quants: tuple[str, ...]) -> list[str]:
    """Files of the target's repository in a lower quant than the target's own: those asked for first, then the
    nearest below, at most SELF_QUANTS."""
    from gguf_bench.models.gguf import quant_name

    t_quant = quant_name(t_header.meta.get("general.file_type"))
    rank = {q: i for i, q in enumerate(QUANT_ORDER)}
    t_rank = rank.get(t_quant, -1)
    lower = sorted((f for f in files if rank.get(quant_of(f) or "", -1) > t_rank), key=lambda f: rank[quant_of(f)])
    preferred = [f for f in lower if quant_of(f) in {q.upper() for q in quants}]
    return list(dict.fromkeys(preferred + lower))[:SELF_QUANTS]


def _spelling(repo: str, name: str, files: list[str]) -> str:
    """REPO:QUANT when that picks exactly this file (llama.cpp's -hf spelling), else REPO/FILE."""
    q = quant_of(name)
    if q and sum(1 for f in files if q.lower() in f.lower()) == 1:
        return f"{repo}:{q}"
    return f"{repo}/{name}"


def header_json(h: Header) -> dict:
    """What a header says of the model's size: every part of a split model counted."""
    shape = h.planner_shape()
    return {"architecture": h.architecture, "file_size": h.file_size, "parts": h.n_parts, "params": h.n_params,
            "active_params": h.active_params, "weights_bytes": sum(w.bytes for w in shape.weights) if shape else None}


def to_json(search: Search) -> list[dict]:
    """Each candidate as a JSON-ready dict (no tokens)."""
    out = []
    for c in search.candidates:
        h = c.header
        out.append({"name": c.name, "origin": c.origin, "type": c.kind, "status": c.status, "reason": c.reason,
                    "architecture": h.architecture if h else None, "file_size": h.file_size if h else None,
                    "params": h.n_params if h else None, "active_params": h.active_params if h else None})
    return json.loads(json.dumps(out))
