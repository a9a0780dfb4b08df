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

Variants: `--cmake -DNAME=VALUE` (repeatable; `cmake_options`) builds the same sources with CMake options of the
user's, to compare two builds (OpenMP on and off: `-DGGML_OPENMP=OFF`, which makes ggml use its own threadpool). The
options, each name's last value and sorted by name, are part of the tree's folder (`variant`: `tree-cpu` and
`tree-cpu-GGML_OPENMP=OFF` side by side), so two variants coexist and a second call finds its own. The options that
would build something other than a tree (static libraries, no server, no RPC) or that have flags of their own
(the backend, the CUDA architectures) are refused. `-DLLAMA_BUILD_APP=ON` also builds llama.cpp's unified `llama`
binary (`llama serve` is llama-server: runtimes/llama_server.server_command).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from gguf_bench.errors import BenchError
from gguf_bench.models.files import cache_dir
from gguf_bench.runtimes import build

TREE_BACKENDS = ("cpu", "cuda", "vulkan")
TOOLS = ("llama-server", "llama-fit-params", "llama-gguf-split", "ggml-rpc-server")  # server_build.TOOLS + RPC_SERVER
TARGETS = ("llama", *TOOLS)  # ggml, its backends and common come with them
LIBS = ("libllama.so", "libggml.so", "libggml-base.so", "libggml-cpu.so", "libggml-rpc.so")  # + libggml-<backend>.so
MARKER = "built-by-gguf-bench-tree.txt"  # in bin/: libraries and tools of one tree (server_build reads it)
OPTIONS = "cmake options: "  # the marker's line of the --cmake options (JSON), which complete() compares
FLAGS = ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=ON", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
         "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF",
         "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON", "-DGGML_RPC=ON"]
BACKEND_FLAGS = {"cpu": [], "cuda": ["-DGGML_CUDA=ON"], "vulkan": ["-DGGML_VULKAN=ON"]}
NVCC = "/usr/local/cuda/bin/nvcc"  # where build.check_requirements also looks
APP = ("llama-app", "llama")  # llama.cpp's unified binary: its CMake target and its file (LLAMA_BUILD_APP=ON)
# what --cmake may not set: what makes the build a tree both engines run (FLAGS), and what has a flag of its own
OWN = {"BUILD_SHARED_LIBS": "a tree's libraries are shared", "LLAMA_BUILD_TOOLS": "a tree builds the tools",
       "LLAMA_BUILD_SERVER": "a tree builds llama-server", "GGML_RPC": "a tree has the RPC backend",
       "GGML_CUDA": "use --cuda", "GGML_VULKAN": "use --vulkan", "CMAKE_CUDA_ARCHITECTURES": "use --cuda-arch"}
_OPTION = re.compile(r"^(?:-D)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::[A-Za-z]+)?=(?P<value>.*)$")
_SAFE = re.compile(r"^[A-Za-z0-9_=.,+-]+$")


def cmake_options(given: Sequence[str]) -> dict[str, str]:
    """`--cmake` options as {NAME: VALUE} ('-DGGML_OPENMP=OFF', 'GGML_OPENMP=OFF', '-DNAME:BOOL=OFF'), a name given
    twice taking its last value, sorted by name; one line for an option that is not -DNAME=VALUE or is not the user's
    to set (OWN)."""
    out: dict[str, str] = {}
    for option in given:
        m = _OPTION.match(option.strip())
        if m is None:
            raise BenchError(f"--cmake {option}: give a CMake cache option as -DNAME=VALUE (for instance "
                             "-DGGML_OPENMP=OFF)")
        if m["name"] in OWN:
            raise BenchError(f"--cmake {option}: {m['name']} is set by build-tree ({OWN[m['name']]})")
        out[m["name"]] = m["value"]
    return dict(sorted(out.items()))


def variant(options: dict[str, str]) -> str:
    """What the options add to the tree's folder name: '' for none, 'GGML_OPENMP=OFF' (several joined by ','), or,
    where that would be long or unsafe in a path, 'cmake-' and a hash of them."""
    text = ",".join(f"{k}={v}" for k, v in options.items())
    if not text or (len(text) <= 80 and _SAFE.match(text)):
        return text
    return "cmake-" + hashlib.sha256(text.encode()).hexdigest()[:12]


def tree_dir(backend: str, version: str | None = None, options: dict[str, str] | None = None) -> Path:
    """The build tree of `backend` (and of these --cmake options: a variant's own folder) in the cache."""
    name = "-".join(filter(None, (f"tree-{backend}", variant(options or {}))))
    return cache_dir() / f"llama.cpp-{version or build.installed_version()}" / name


def builds_app(options: dict[str, str] | None) -> bool:
    """Whether the options turn on llama.cpp's unified binary (LLAMA_BUILD_APP, a CMake boolean)."""
    return (options or {}).get("LLAMA_BUILD_APP", "").upper() in ("ON", "1", "TRUE", "YES", "Y")


def targets(options: dict[str, str] | None = None) -> tuple[str, ...]:
    return (*TARGETS, APP[0]) if builds_app(options) else TARGETS


def programs(options: dict[str, str] | None = None) -> tuple[str, ...]:
    """The programs a finished tree has in bin/."""
    return (*TOOLS, APP[1]) if builds_app(options) else TOOLS


def lib_dir(tree: Path) -> Path:
    """What LLAMA_CPP_LIB_PATH names: the tree's bin/ (libraries and programs)."""
    return tree / "bin"


def cmake_flags(backend: str, cuda_arch: str | None = None, generator: bool = True,
                options: dict[str, str] | None = None) -> list[str]:
    """The configure flags: a tree's (FLAGS), the backend's, then the user's --cmake options (later: they win)."""
    if backend not in BACKEND_FLAGS:
        raise BenchError(f"unknown backend '{backend}'; choose from {', '.join(TREE_BACKENDS)}")
    flags = [*FLAGS, *BACKEND_FLAGS[backend]]
    flags = [f for f in flags if f.split("=")[0][2:] not in (options or {})]  # the user's value in place of ours
    flags += [f"-D{k}={v}" for k, v in (options or {}).items()]
    if backend == "cuda" and cuda_arch:
        flags.append(f"-DCMAKE_CUDA_ARCHITECTURES={cuda_arch}")
    if backend == "cuda" and not shutil.which("nvcc") and Path(NVCC).is_file():  # the toolkit, not on PATH
        flags.append(f"-DCMAKE_CUDA_COMPILER={NVCC}")
    if generator and shutil.which("ninja"):
        flags = ["-G", "Ninja", *flags]
    return flags


def complete(tree: Path, options: dict[str, str] | None = None) -> bool:
    """Every library and tool of a finished build is there, built with these --cmake options (its marker names them)."""
    bin_ = lib_dir(tree)
    if not (bin_ / MARKER).is_file() or not all((bin_ / name).exists() for name in (*LIBS, *programs(options))):
        return False
    return built_with(tree) == (options or {})


def built_with(tree: Path) -> dict[str, str]:
    """The --cmake options a tree was built with, from its marker's OPTIONS line ({} for none, and for a tree built
    before the line was written)."""
    for line in (lib_dir(tree) / MARKER).read_text(errors="replace").splitlines():
        if line.startswith(OPTIONS):
            return json.loads(line[len(OPTIONS):])
    return {}


def build_tree(backend: str, tree: Path | None = None, jobs: int | None = None, cuda_arch: str | None = None,
               log: Path | None = None, options: dict[str, str] | None = None) -> Path:
    """Configure and build `TARGETS` of the vendored llama.cpp with `backend` (and the --cmake `options`,
    cmake_options) in `tree` (default `tree_dir`: the variant's own), once; returns its bin/ (for
    LLAMA_CPP_LIB_PATH). A complete tree is returned as it is."""
    tree = tree or tree_dir(backend, options=options)
    if complete(tree, options):
        return lib_dir(tree)
    build.check_requirements(backend)
    tree.mkdir(parents=True, exist_ok=True)
    log = log or tree / "build.log"
    src = build.sources(build.installed_version(), log)
    if backend == "vulkan" and not build.headers_have_layer_settings():
        build.guard_layer_settings(src)
    flags = cmake_flags(backend, cuda_arch, options=options)
    build.run_logged(["cmake", "-S", str(src / "vendor" / "llama.cpp"), "-B", str(tree), *flags], log)
    build.run_logged(["cmake", "--build", str(tree), "--target", *targets(options), "-j", str(jobs or os.cpu_count() or 1)],
                     log)
    bin_ = lib_dir(tree)
    absent = [name for name in (*LIBS, *programs(options)) if not (bin_ / name).exists()]
    if absent:
        raise BenchError(f"the build wrote no {', '.join(absent)} in {bin_}; the log is {log}")
    (bin_ / MARKER).write_text(f"llama-cpp-python {build.installed_version()}, {backend}: one CMake build "
                               f"({' '.join(flags)}); set LLAMA_CPP_LIB_PATH={bin_} for both engines\n"
                               f"{OPTIONS}{json.dumps(options or {})}\n")
    return bin_


