"""`gguf-bench build-gpu`: llama-cpp-python with a GPU backend, built from its own sdist into this environment;
`gguf-bench build-server`: llama-server from the same sources, on the same ggml; `gguf-bench build-tree`: the libraries
and the tools in one CMake build, for both engines through LLAMA_CPP_LIB_PATH; `gguf-bench rpc-server`: one of
llama.cpp's RPC servers on this machine."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from gguf_bench.cli.app import command, console, err
from gguf_bench.errors import BenchError
from gguf_bench.runtimes import build, server_build, tree_build
from gguf_bench.runtimes.llama_server import probe
from gguf_bench.runtimes.rpc import RpcServer


@command
def build_gpu(vulkan: Annotated[bool, typer.Option("--vulkan", help="the Vulkan backend (any GPU; Mesa's lavapipe on "
                                                   "a machine without one)")] = False,
              cuda: Annotated[bool, typer.Option("--cuda", help="the CUDA backend (NVIDIA, needs nvcc)")] = False,
              jobs: Annotated[int | None, typer.Option("--jobs", "-j", help="parallel compile jobs (default: all cores)")] = None,
              check: Annotated[bool, typer.Option("--check", help="only check the system packages it needs")] = False) -> None:
    """Install llama-cpp-python with a GPU backend into this environment, from the installed version's sdist (the wheel
    is kept in the cache: a second call installs it in seconds)."""
    if vulkan == cuda:
        raise BenchError("choose one backend: --vulkan or --cuda")
    backend = "vulkan" if vulkan else "cuda"
    build.check_requirements(backend)
    if check:
        console.print(f"{backend}: every system package the build needs is installed")
        return
    version = build.installed_version()
    log = build.wheel_dir(backend, version) / "build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cached = build.cached_wheel(backend, version)
    started = time.monotonic()
    what = "installing the cached" if cached else "compiling"
    err.print(f"{what} llama-cpp-python {version} with {backend}" + ("" if cached else f" (log: {log}; 5 to 30 minutes "
              "on 2 cores)"), markup=False)
    with err.status(f"{what} llama-cpp-python {version} with {backend} ..."):
        wheel = build.build_wheel(backend, version, log, jobs)
        build.install(wheel, log)
    console.print(f"installed {wheel.name} ({backend}) in {time.monotonic() - started:.0f} s", markup=False)
    if build.offload_available(backend):
        console.print("GPU offload: yes" + (" (with GGML_VK_VISIBLE_DEVICES=0 for a CPU-type device such as lavapipe)"
                                            if backend == "vulkan" else ""), markup=False)
    else:
        err.print("Warning: the build has the backend but sees no GPU device; `gguf-bench info` says what to set",
                  markup=False)


@command
def build_server(jobs: Annotated[int | None, typer.Option("--jobs", "-j", help="parallel compile jobs (default: all "
                                                          "cores)")] = None,
                 rpc: Annotated[bool, typer.Option("--rpc", help="instead: llama-server and ggml-rpc-server with llama.cpp's "
                                                   "RPC backend, from the CPU `build-tree` build (for --rpc and "
                                                   "`gguf-bench rpc-server`)")] = False) -> None:
    """Build llama-server, llama-fit-params (llama.cpp's own fitting, for `plan --compare-fit`) and llama-gguf-split
    (writes and merges split GGUF files) from the installed
    llama-cpp-python's own llama.cpp sources, on the ggml it installed (CPU, Vulkan or CUDA, as `build-gpu` left it),
    into the cache, in one build; a second call does nothing (only a missing one is built)."""
    version = build.installed_version()
    where = server_build.build_dir(version, rpc)
    tools = server_build.RPC_TOOLS if rpc else server_build.TOOLS
    missing = [name for name in tools if server_build.cached_binary(name, rpc) is None]
    if missing:
        where.mkdir(parents=True, exist_ok=True)
        log = where / "build.log"
        flavour = server_build.RPC_FLAVOUR if rpc else server_build.backend()
        err.print(f"compiling {' and '.join(missing)} {version} ({flavour}) into {where} (log: {log}; "
                  f"about {10 if rpc else 15} minutes on 2 cores)", markup=False)
        started = time.monotonic()
        with err.status(f"compiling {' and '.join(missing)} ..."):
            server_build.build_tools(log, jobs, tools, rpc)
        err.print(f"built in {time.monotonic() - started:.0f} s", markup=False)
    binary = where / server_build.BINARY
    version_line = probe(binary, {"LD_LIBRARY_PATH": str(where)} if rpc else server_build.library_env())
    console.print(f"llama-server: {binary} ({version_line}, {server_build.RPC_FLAVOUR if rpc else server_build.backend()})",
                  markup=False)
    for name in tools[1:]:
        console.print(f"{name}: {where / name}", markup=False)


@command
def build_tree(cpu: Annotated[bool, typer.Option("--cpu", help="ggml's CPU backend only")] = False,
               cuda: Annotated[bool, typer.Option("--cuda", help="the CUDA backend (NVIDIA, needs nvcc)")] = False,
               vulkan: Annotated[bool, typer.Option("--vulkan", help="the Vulkan backend")] = False,
               cuda_arch: Annotated[str | None, typer.Option("--cuda-arch", help="CMAKE_CUDA_ARCHITECTURES, the card's "
                                                             "alone (90 for an H100: nvidia-smi --query-gpu="
                                                             "compute_cap); default: llama.cpp's list, far "
                                                             "longer")] = None,
               out: Annotated[Path | None, typer.Option("--out", "-o", help="the build tree (default: "
                                                        "~/.cache/gguf-bench/llama.cpp-<version>/tree-<backend>)")] = None,
               jobs: Annotated[int | None, typer.Option("--jobs", "-j", help="parallel compile jobs (default: all "
                                                        "cores)")] = None,
               cmake: Annotated[list[str] | None, typer.Option("--cmake", help="a CMake option of the variant to build, "
                                                               "-DNAME=VALUE (repeat it: --cmake -DGGML_OPENMP=OFF "
                                                               "--cmake -DLLAMA_BUILD_APP=ON); the options name the "
                                                               "tree's folder, so variants sit side by side")] = None) -> None:
    """Compile llama.cpp's shared libraries, llama-server, llama-fit-params and llama-gguf-split in one CMake build of
    the installed llama-cpp-python's own sources (ggml and its backend compiled once); then LLAMA_CPP_LIB_PATH=<tree>/bin
    points both engines at it. A second call with everything built does nothing. --cmake builds a variant (OpenMP off,
    say) in a folder of its own, to compare two builds."""
    if cpu + cuda + vulkan != 1:
        raise BenchError("choose one backend: --cpu, --cuda or --vulkan")
    backend = "cpu" if cpu else "cuda" if cuda else "vulkan"
    if cuda_arch and not cuda:
        raise BenchError("--cuda-arch goes with --cuda")
    options = tree_build.cmake_options(cmake or [])
    tree = out or tree_build.tree_dir(backend, options=options)
    if not tree_build.complete(tree, options):
        log = tree / "build.log"
        variant = f", {tree_build.variant(options)}" if options else ""
        err.print(f"compiling {', '.join(tree_build.targets(options))} ({backend}{variant}) in {tree} (log: {log})",
                  markup=False)
        started = time.monotonic()
        with err.status(f"compiling llama.cpp ({backend}) ..."):
            tree_build.build_tree(backend, tree, jobs, cuda_arch, options=options)
        err.print(f"built in {time.monotonic() - started:.0f} s", markup=False)
    console.print(f"LLAMA_CPP_LIB_PATH={tree_build.lib_dir(tree.resolve())}", markup=False, soft_wrap=True)


@command
def rpc_server(port: Annotated[int, typer.Option("--port", help="the TCP port it listens on (127.0.0.1 only)")] = 50052,
               threads: Annotated[int | None, typer.Option("--threads", "-t", help="CPU threads of its CPU device "
                                                           "(default: all cores)")] = None) -> None:
    """Start llama.cpp's ggml-rpc-server (from `build-server --rpc`) on 127.0.0.1:PORT, offering this machine's devices
    to `--rpc`, until Ctrl-C; it stops with this command. Insecure by llama.cpp's own word: loopback only here."""
    with RpcServer(port, threads) as server:
        console.print(f"rpc-server listening on {server.endpoint} ({server.binary}); stop with Ctrl-C", markup=False)
        try:
            server.proc.wait()
        except KeyboardInterrupt:
            return
    raise BenchError(f"the rpc-server on {server.endpoint} exited with code {server.proc.returncode}")
