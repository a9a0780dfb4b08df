"""One CMake build of llama.cpp for both engines: `gguf-bench build-tree --cpu|--cuda|--vulkan`.

The installed llama-cpp-python's own llama.cpp sources (its sdist's `vendor/llama.cpp`, as `build-gpu` and
`build-server` use) are compiled once with `BUILD_SHARED_LIBS=ON` and the backend's flag, for the targets `TARGETS`
only: the shared libraries (libllama.so, libggml.so, libggml-base.so, libggml-cpu.so and the backend's, such as
libggml-cuda.so, and libggml-rpc.so), llama-server, llama-fit-params, llama-gguf-split and ggml-rpc-server, all in the
build tree's `bin/` (llama.cpp's
CMakeLists puts libraries and programs there; each library finds the others through its build RPATH). ggml and its
backend are compiled once: on a CUDA machine nvcc compiles ggml-cuda once, where `build-gpu --cuda` followed by
`build-server` compiled it twice (a wheel, then the server's own copy had it not reused the installed ggml).

Both engines then run that build when `LLAMA_CPP_LIB_PATH` names its `bin/`:
- the Python engine: llama-cpp-python reads `LLAMA_CPP_LIB_PATH` when `llama_cpp` is first imported
  (`llama_cpp/llama_cpp.py`: `load_shared_library("llama", LLAMA_CPP_LIB_PATH)`); libllama.so there loads the
  tree's ggml through its RPATH (the Python package's own `llama_cpp/lib` is then not loaded);
- the server engine and llama-fit-params: `server_build.llama_cpp_libs()` is that folder too, and `build_dir()` is it
  when it holds this build's marker (`MARKER`), so `find_server`, `build-server` and the tests' tool fixtures find
  the tree's binaries, and the server runs with that folder on LD_LIBRARY_PATH.

Generic over the backend: `--cpu` builds the same tree with ggml's CPU backend only (how the kit's dry-run and the
tests prove it on a machine without a GPU); `--cuda` takes `CMAKE_CUDA_ARCHITECTURES` from `--cuda-arch` (the kit
reads the card's compute capability from nvidia-smi), as one architecture compiles several times faster than
llama.cpp's default list. Every tree has ggml's RPC backend (`GGML_RPC=ON`) and ggml-rpc-server: the CPU tree is also
what `build-server --rpc` builds (server_build.rpc_dir), so a machine compiles full ggml once for the tree, RPC and the
GPU kit's dry-run, not once per use. The tree stays where it was built (its `bin/` is what runs), by default
`~/.cache/gguf-bench/llama.cpp-<version>/tree-<backend>/`; a second call with every target there does nothing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from gguf_bench.errors import BenchError
from gguf_bench.models.files import cache_dir
from gguf_bench.runtimes import build

TREE_BACKENDS = ("cpu", "cuda", "vulkan")
TOOLS = ("llama-server", "llama-fit-params", "llama-gguf-split", "ggml-rpc-server")  # server_build.TOOLS + RPC_SERVER
TARGETS = ("llama", *TOOLS)  # ggml, its backends and common come with them
LIBS = ("libllama.so", "libggml.so", "libggml-base.so", "libggml-cpu.so", "libggml-rpc.so")  # + libggml-<backend>.so
MARKER = "built-by-gguf-bench-tree.txt"  # in bin/: libraries and tools of one tree (server_build reads it)
FLAGS = ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=ON", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
         "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF",
         "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON", "-DGGML_RPC=ON"]
BACKEND_FLAGS = {"cpu": [], "cuda": ["-DGGML_CUDA=ON"], "vulkan": ["-DGGML_VULKAN=ON"]}
NVCC = "/usr/local/cuda/bin/nvcc"  # where build.check_requirements also looks


def tree_dir(backend: str, version: str | None = None) -> Path:
    """The default build tree of `backend` in the cache."""
    return cache_dir() / f"llama.cpp-{version or build.installed_version()}" / f"tree-{backend}"


def lib_dir(tree: Path) -> Path:
    """What LLAMA_CPP_LIB_PATH names: the tree's bin/ (libraries and programs)."""
    return tree / "bin"


def cmake_flags(backend: str, cuda_arch: str | None = None, generator: bool = True) -> list[str]:
    if backend not in BACKEND_FLAGS:
        raise BenchError(f"unknown backend '{backend}'; choose from {', '.join(TREE_BACKENDS)}")
    flags = [*FLAGS, *BACKEND_FLAGS[backend]]
    if backend == "cuda" and cuda_arch:
        flags.append(f"-DCMAKE_CUDA_ARCHITECTURES={cuda_arch}")
    if backend == "cuda" and not shutil.which("nvcc") and Path(NVCC).is_file():  # the toolkit, not on PATH
        flags.append(f"-DCMAKE_CUDA_COMPILER={NVCC}")
    if generator and shutil.which("ninja"):
        flags = ["-G", "Ninja", *flags]
    return flags


def complete(tree: Path) -> bool:
    """Every library and tool of a finished build is there."""
    bin_ = lib_dir(tree)
    return (bin_ / MARKER).is_file() and all((bin_ / name).exists() for name in (*LIBS, *TOOLS))


def build_tree(backend: str, tree: Path | None = None, jobs: int | None = None, cuda_arch: str | None = None,
               log: Path | None = None) -> Path:
    """Configure and build `TARGETS` of the vendored llama.cpp with `backend` in `tree` (default `tree_dir`), once;
    returns its bin/ (for LLAMA_CPP_LIB_PATH). A complete tree is returned as it is."""
    tree = tree or tree_dir(backend)
    if complete(tree):
        return lib_dir(tree)
    build.check_requirements(backend)
    tree.mkdir(parents=True, exist_ok=True)
    log = log or tree / "build.log"
    src = build.sources(build.installed_version(), log)
    if backend == "vulkan" and not build.headers_have_layer_settings():
        build.guard_layer_settings(src)
    flags = cmake_flags(backend, cuda_arch)
    build.run_logged(["cmake", "-S", str(src / "vendor" / "llama.cpp"), "-B", str(tree), *flags], log)
    build.run_logged(["cmake", "--build", str(tree), "--target", *TARGETS, "-j", str(jobs or os.cpu_count() or 1)], log)
    bin_ = lib_dir(tree)
    absent = [name for name in (*LIBS, *TOOLS) if not (bin_ / name).exists()]
    if absent:
        raise BenchError(f"the build wrote no {', '.join(absent)} in {bin_}; the log is {log}")
    (bin_ / MARKER).write_text(f"llama-cpp-python {build.installed_version()}, {backend}: one CMake build "
                               f"({' '.join(flags)}); set LLAMA_CPP_LIB_PATH={bin_} for both engines\n")
    return bin_


