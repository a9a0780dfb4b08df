"""Build llama-server and llama-fit-params from the installed llama-cpp-python's own sources: `gguf-bench build-server`.

The llama.cpp tree vendored in the llama-cpp-python sdist is configured as the top-level project with
`LLAMA_USE_SYSTEM_GGML=ON`, pointed at the ggml that llama-cpp-python installed (its `lib/cmake/ggml`), so only
libllama, common and the tools are compiled (linked in statically) and the server runs on the very ggml libraries the
Python engine loads: the same kernels, the same backend (CPU, Vulkan or CUDA: whatever `build-gpu` installed). A
difference between the two engines comes from the decoding loop, never from the kernels. At run time the server is
started with the Python engine's library folder first on LD_LIBRARY_PATH (`library_env`).

Offline: no OpenSSL (HTTPS only serves `-hf` downloads), no prebuilt web UI (it would be downloaded from the hub),
no tests or examples. The binaries and the build log go to `~/.cache/gguf-bench/llama.cpp-<version>/<backend>/`; a
second call finds them and does nothing. The tools (`TOOLS`: llama-server; llama-fit-params, llama.cpp's own
fitting of one model to free device memory, runtimes/fit_params.py; llama-gguf-split, which writes and merges split
GGUF files as the hub ships big models) are built in one CMake build when none is cached,
so libllama and common are compiled once; when only one is missing, only that one.

`build-server --rpc`: the installed ggml has no RPC backend (llama-cpp-python builds without GGML_RPC), so llama-server
and ggml-rpc-server (tools/rpc: a machine's devices offered over TCP) come from the CPU `build-tree` build, which has
`GGML_RPC=ON` as llama.cpp's tools/rpc/README.md documents (`.../llama.cpp-<version>/tree-cpu/bin/`, `rpc_dir`; or
the tree LLAMA_CPP_LIB_PATH names): one full compile of ggml serves the tree, RPC and the GPU kit's dry-run. Its
binaries find the tree's libraries through their build RPATH. A sweep with `--rpc` runs that llama-server (or
--server-bin).

`LLAMA_CPP_LIB_PATH` naming the bin/ of a `build-tree` build (runtimes/tree_build.py: libraries and tools from one
CMake build) points both engines at it: llama-cpp-python loads its libllama.so, and here `llama_cpp_libs()` is that
folder and `build_dir()` too (its marker says it holds the tools), so the server, llama-fit-params and llama-gguf-split
are that build's, ahead of any on PATH; nothing is compiled.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from gguf_bench.errors import BenchError
from gguf_bench.models.files import cache_dir
from gguf_bench.runtimes import build, tree_build
from gguf_bench.runtimes.llama_server import unified_on_path

BINARY = "llama-server"
FIT_PARAMS = "llama-fit-params"  # tools/fit-params
GGUF_SPLIT = "llama-gguf-split"  # tools/gguf-split: splits a GGUF into parts as the hub ships big models, and merges
TOOLS = (BINARY, FIT_PARAMS, GGUF_SPLIT)
RPC_SERVER = "ggml-rpc-server"  # tools/rpc (its CMake target)
RPC_TOOLS = (BINARY, RPC_SERVER)
RPC_FLAVOUR = "tree-cpu, RPC on"  # what `build-server --rpc` says it built
MARKER = "built-by-gguf-bench.txt"  # beside a binary build_server made: it runs on the Python engine's ggml
CMAKE_FLAGS = ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_USE_SYSTEM_GGML=ON",
               "-DLLAMA_OPENSSL=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_BUILD_TESTS=OFF",
               "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF"]


def llama_cpp_libs() -> Path:
    """The folder of the ggml/llama libraries the Python engine loads: LLAMA_CPP_LIB_PATH where set (llama-cpp-python
    reads it), else llama_cpp/lib."""
    if override := os.environ.get("LLAMA_CPP_LIB_PATH"):
        return Path(override)
    return _package_libs()


def _package_libs() -> Path:
    """llama-cpp-python's own llama_cpp/lib."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise BenchError("llama-cpp-python is not installed in this environment: pip install -e . first")
    return Path(next(iter(spec.submodule_search_locations))) / "lib"


def ggml_cmake_dir() -> Path:
    """llama-cpp-python installs ggml's CMake package beside itself (site-packages/lib/cmake/ggml)."""
    path = _package_libs().parent.parent / "lib" / "cmake" / "ggml"
    if not (path / "ggml-config.cmake").is_file():
        raise BenchError(f"llama-cpp-python's ggml CMake package is not at {path}; reinstall llama-cpp-python from its "
                         "sdist (pip install --force-reinstall --no-binary llama-cpp-python llama-cpp-python)")
    return path


def backend() -> str:
    """The GPU backend the installed ggml has ('cuda', 'vulkan'), else 'cpu': part of the cache folder's name."""
    libs = llama_cpp_libs()
    for name in build.BACKENDS:
        if any(libs.glob(f"libggml-{name}.so*")):
            return name
    return "cpu"


def active_tree() -> Path | None:
    """The bin/ of the `build-tree` build LLAMA_CPP_LIB_PATH names (its libraries and tools), else None."""
    override = os.environ.get("LLAMA_CPP_LIB_PATH")
    return Path(override) if override and (Path(override) / tree_build.MARKER).is_file() else None


def build_dir(version: str | None = None, rpc: bool = False) -> Path:
    if (found := active_tree()) is not None:
        return found
    if rpc:
        return rpc_dir(version)
    return cache_dir() / f"llama.cpp-{version or build.installed_version()}" / backend()


def rpc_dir(version: str | None = None) -> Path:
    """Where `build-server --rpc`'s tools are: the CPU tree's bin/ (module note)."""
    return tree_build.lib_dir(tree_build.tree_dir("cpu", version))


def cached_binary(name: str = BINARY, rpc: bool = False) -> Path | None:
    path = build_dir(rpc=rpc) / name
    return path if path.is_file() and os.access(path, os.X_OK) else None


def library_env() -> dict[str, str]:
    """What a server built here needs to load the Python engine's ggml (and, for lavapipe, see the device)."""
    libs = str(llama_cpp_libs())
    env = {"LD_LIBRARY_PATH": os.pathsep.join(p for p in (libs, os.environ.get("LD_LIBRARY_PATH")) if p)}
    if backend() == "vulkan":
        env.update(build.vulkan_env())
    return env


def build_server(log: Path, jobs: int | None = None) -> Path:
    """Compile llama-server into the cache (with llama-fit-params when neither is there); the cached binary if it is
    there."""
    return build_tools(log, jobs, (BINARY,))[BINARY]


def build_tools(log: Path, jobs: int | None = None, wanted: tuple[str, ...] = TOOLS, rpc: bool = False) -> dict[str, Path]:
    """The `wanted` tools, from the cache; when one is missing, every tool not cached yet is compiled in one CMake
    build (`--target` each), so a fresh cache compiles libllama and common once. rpc: RPC_TOOLS, of the CPU tree (built
    by `build-tree --cpu` when absent)."""
    missing = [name for name in (RPC_TOOLS if rpc else TOOLS) if cached_binary(name, rpc) is None]
    if any(name in missing for name in wanted):
        if rpc and active_tree() is None:
            tree_build.build_tree("cpu", jobs=jobs, log=log)
        else:
            _compile(missing, log, jobs)
    return {name: build_dir(rpc=rpc) / name for name in wanted}


def _compile(names: list[str], log: Path, jobs: int | None) -> None:
    if (found := active_tree()) is not None:
        raise BenchError(f"LLAMA_CPP_LIB_PATH={found} is a `build-tree` build without {', '.join(names)}: run "
                         "`gguf-bench build-tree` into it again, or unset LLAMA_CPP_LIB_PATH")
    build.check_requirements("cpu")
    version = build.installed_version()
    src = build.sources(version, log) / "vendor" / "llama.cpp"
    out = build_dir(version)
    tree = out / "build"
    out.mkdir(parents=True, exist_ok=True)
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    flags = [*CMAKE_FLAGS, f"-Dggml_DIR={ggml_cmake_dir()}"]
    build.run_logged(["cmake", "-S", str(src), "-B", str(tree), *generator, *flags], log)
    build.run_logged(["cmake", "--build", str(tree), "--target", *names, "-j", str(jobs or os.cpu_count() or 1)], log)
    for name in names:
        shutil.copy2(tree / "bin" / name, out / name)
    (out / MARKER).write_text(f"llama-cpp-python {version}, {backend()} ggml, LLAMA_USE_SYSTEM_GGML: run "
                              f"{' and '.join(TOOLS)} with LD_LIBRARY_PATH set to llama_cpp/lib of the environment "
                              "that runs them\n")
    shutil.rmtree(tree, ignore_errors=True)  # a few hundred MB of objects; the binaries are all that is used


def find_server(explicit: Path | None, rpc: bool = False) -> tuple[Path, dict[str, str]]:
    """The llama-server to run and the environment it needs: --server-bin, else the `build-tree` build's that
    LLAMA_CPP_LIB_PATH names, else `llama-server` on PATH, else llama.cpp's unified `llama` on PATH (run as `llama
    serve`: llama_server.server_command), else the one `build-server` made. rpc (a setting with
    --rpc): --server-bin, else the one `build-server --rpc` made."""
    if explicit is not None:
        if not explicit.is_file() or not os.access(explicit, os.X_OK):
            raise BenchError(f"--server-bin {explicit} is not an executable file")
        if (explicit.parent / tree_build.MARKER).is_file():  # a build-tree binary: its own tree's libraries
            return explicit, {"LD_LIBRARY_PATH": str(explicit.parent)}
        return explicit, library_env() if (explicit.parent / MARKER).is_file() else {}
    if rpc:
        binary = rpc_binary(BINARY)
        return binary, {"LD_LIBRARY_PATH": str(binary.parent)}
    if active_tree() is not None and (binary := cached_binary()) is not None:  # the tree LLAMA_CPP_LIB_PATH names
        return binary, library_env()
    on_path = shutil.which(BINARY)
    if on_path:
        return Path(on_path), {}
    if (unified := unified_on_path()) is not None:  # llama.cpp's one `llama` binary: `llama serve`
        return unified, {}
    if (binary := cached_binary()) is not None:
        return binary, library_env()
    raise BenchError("no llama-server found (neither llama-server nor llama.cpp's `llama` on PATH, not built): run "
                     "`gguf-bench build-server` (about 15 minutes on 2 cores, once), or pass --server-bin PATH")


def rpc_binary(name: str) -> Path:
    """A tool of the RPC build (llama-server or ggml-rpc-server), or one line saying how to build it."""
    found = cached_binary(name, rpc=True)
    if found is None:
        raise BenchError(f"no RPC-capable {name} built: run `gguf-bench build-server --rpc` (the CPU tree with RPC on, "
                         "about 10 minutes on 2 cores, once), or pass --server-bin PATH of a llama-server built with -DGGML_RPC=ON")
    return found
