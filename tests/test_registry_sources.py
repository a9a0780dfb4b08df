"""models.yaml parsing, PyPI-packaged models (real pip against a local wheel folder), derived copies."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from gguf_bench.errors import DownloadError, RegistryError
from gguf_bench.models.download import fetch, locate
from gguf_bench.models.registry import DerivedSource, HubSource, PypiSource, load_registry
from gguf_bench.runtimes.llama_cpp import quantize, read_info

from conftest import REPO_ROOT


def test_every_shipped_pair_parses():
    reg = load_registry(REPO_ROOT / "models.yaml")
    assert reg.default in reg.pairs and reg.pairs[reg.default].offline
    assert len([p for p in reg.pairs.values() if p.offline]) >= 2
    for pair in reg.pairs.values():
        assert pair.target.name != pair.draft.name
    hub = [m for m in reg.models.values() if isinstance(m.source, HubSource)]
    assert {m.source.repo for m in hub} >= {"NousResearch/Meta-Llama-3-70B-Instruct-GGUF",
                                              "QuantFactory/Meta-Llama-3-8B-Instruct-GGUF"}
    derived = [m for m in reg.models.values() if isinstance(m.source, DerivedSource)]
    assert all(reg.base_of(m).name in reg.models for m in derived)


GOOD = """
default: p
models:
  a: {path: a.gguf}
  b: {derive: {from: a, quant: Q8_0}}
pairs:
  p: {target: a, draft: b}
"""


@pytest.mark.parametrize("text, where, what", [
    ("models: [1]\npairs: {}", "models", "non-empty mapping"),
    (GOOD.replace("{path: a.gguf}", "{path: a.gguf, hf: {repo: x/y, file: a.gguf}}"), "models.a", "exactly one source"),
    (GOOD.replace("quant: Q8_0", "quant: Q9_X"), "models.b.derive.quant", "must be one of"),
    (GOOD.replace("from: a", "from: zz"), "models.b.derive.from", "unknown model 'zz'"),
    (GOOD.replace("draft: b", "draft: bb"), "pairs.p.draft", "unknown model 'bb'"),
    (GOOD.replace("default: p", "default: q"), "default", "must name one of the pairs"),
    (GOOD.replace("{path: a.gguf}", "{hf: {repo: noslash, file: a.gguf}}"), "models.a.hf.repo", "owner/name"),
    (GOOD.replace("{path: a.gguf}", "{hf: {repo: x/y, file: a.bin}}"), "models.a.hf.file", ".gguf"),
    (GOOD.replace("{path: a.gguf}", "{hf: {repo: x/y, file: a.gguf, pattern: '*.gguf'}}"), "models.a.hf",
     "exactly one of 'file' and 'pattern'"),
    (GOOD.replace("{path: a.gguf}", "{hf: {repo: x/y, file: a.gguf, sha256: abc}}"), "models.a.hf.sha256", "64 hex"),
    ("pairs: [oops", "line", "not valid YAML"),
])
def test_malformed_registry_names_file_and_key(tmp_path, text, where, what):
    path = tmp_path / "models.yaml"
    path.write_text(text)
    with pytest.raises(RegistryError) as exc:
        load_registry(path)
    msg = str(exc.value)
    assert str(path) in msg and where in msg and what in msg, msg


def test_local_path_is_relative_to_registry(tmp_path):
    (tmp_path / "models.yaml").write_text(GOOD)
    reg = load_registry(tmp_path / "models.yaml")
    assert reg.models["a"].source.path == tmp_path / "a.gguf"
    with pytest.raises(DownloadError, match="does not exist"):
        fetch(reg.models["a"], reg)


# --- PyPI-packaged models ----------------------------------------------------------------------


def make_wheel(folder: Path, dist: str, member: str, payload: bytes) -> None:
    """A minimal valid wheel holding one data file."""
    name = dist.replace("-", "_")
    info = f"{name}-1.0.dist-info"
    with zipfile.ZipFile(folder / f"{name}-1.0-py3-none-any.whl", "w") as whl:
        whl.writestr(f"{name}/__init__.py", "")
        whl.writestr(member, payload)
        whl.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{info}/RECORD", "")


@pytest.fixture
def wheel_index(tmp_path, tiny_pairs, monkeypatch):
    """Three wheels carrying the tiny target in chunks; pip finds them in a local folder only."""
    data = tiny_pairs["middle"][0].read_bytes()
    folder = tmp_path / "wheels"
    folder.mkdir()
    third = len(data) // 3 + 1
    for i in range(3):
        make_wheel(folder, f"tinychunk-part{i + 1}", f"tinychunk_part{i + 1}/data/tiny.gguf.part{i:02d}",
                   data[i * third:(i + 1) * third])
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    return data


def pypi_registry(tmp_path: Path, sha: str) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(f"""
default: p
models:
  tiny:
    pypi:
      packages: [tinychunk-part1==1.0, tinychunk-part2==1.0, tinychunk-part3==1.0]
      chunk_glob: "*/data/tiny.gguf.part*"
      filename: tiny.gguf
      sha256: "{sha}"
  tiny-f16: {{derive: {{from: tiny, quant: F16}}}}
pairs:
  p: {{target: tiny-f16, draft: tiny}}
""")
    return path


def test_pypi_model_is_assembled_verified_and_cached(tmp_path, wheel_index):
    reg = load_registry(pypi_registry(tmp_path, hashlib.sha256(wheel_index).hexdigest()))
    ref = reg.models["tiny"]
    assert isinstance(ref.source, PypiSource) and locate(ref, reg) is None
    first = fetch(ref, reg, quantize=quantize)
    assert first.did_work and first.path.read_bytes() == wheel_index
    assert locate(ref, reg) == first.path
    second = fetch(ref, reg, quantize=quantize)
    assert not second.did_work and second.path == first.path


def test_pypi_checksum_mismatch_keeps_nothing(tmp_path, wheel_index):
    reg = load_registry(pypi_registry(tmp_path, "ab" * 32))
    with pytest.raises(DownloadError, match="checksum mismatch"):
        fetch(reg.models["tiny"], reg, quantize=quantize)
    assert locate(reg.models["tiny"], reg) is None
    assert not list((tmp_path / "cache" / "pypi").glob("tiny.gguf*"))


def test_pypi_packages_unavailable(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    reg = load_registry(pypi_registry(tmp_path, "ab" * 32))
    with pytest.raises(DownloadError, match="could not download the model's PyPI packages"):
        fetch(reg.models["tiny"], reg, quantize=quantize)


def test_derived_model_built_once_and_rebuilt_when_source_changes(tmp_path, wheel_index):
    reg = load_registry(pypi_registry(tmp_path, hashlib.sha256(wheel_index).hexdigest()))
    ref = reg.models["tiny-f16"]
    first = fetch(ref, reg, quantize=quantize)
    assert first.did_work and read_info(first.path).quant == "F16"
    assert read_info(fetch(reg.models["tiny"], reg, quantize=quantize).path).quant == "F32"
    built = first.path.stat().st_mtime_ns
    again = fetch(ref, reg, quantize=quantize)
    assert not again.did_work and again.path.stat().st_mtime_ns == built
    # a new source file (same bytes, new mtime) is a changed source: rebuild
    src = fetch(reg.models["tiny"], reg, quantize=quantize).path
    src.write_bytes(src.read_bytes())
    rebuilt = fetch(ref, reg, quantize=quantize)
    assert rebuilt.did_work and rebuilt.path.stat().st_mtime_ns != built


@pytest.mark.slow
def test_real_gemma_package_assembles_and_verifies(gemma_pair, real_cache, monkeypatch):
    """The PyPI-packaged gemma-3-270m (253 MB), assembled by the real path and checked by sha256."""
    monkeypatch.setenv("GGUF_BENCH_CACHE", str(real_cache))
    reg = load_registry(REPO_ROOT / "models.yaml")
    ref = reg.models["gemma-3-270m-q4_k_m"]
    path = locate(ref, reg)
    assert path == gemma_pair[1]
    assert path.stat().st_size == ref.size
    from gguf_bench.models.download import sha256_file

    assert sha256_file(path) == ref.source.sha256
    info = read_info(gemma_pair[0])
    assert (info.architecture, info.n_layers, info.n_vocab, info.quant) == ("gemma3", 18, 262144, "F32")
