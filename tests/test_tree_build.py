"""`gguf-bench build-tree`: one CMake build of llama.cpp for both engines (runtimes/tree_build.py), proved here on the CPU
backend: LLAMA_CPP_LIB_PATH on its bin/ makes the Python engine load its libraries and the server engine run its
llama-server. The build itself is the session fixture `cpu_tree` (built once per machine into the shared cache)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cli_helpers import assert_user_error, invoke, pair_args, stored

from gguf_bench.runtimes import server_build, tree_build

PROMPT = "def fibonacci(n):"


def test_the_tree_builds_the_server_builds_tools_and_the_rpc_server():
    assert tree_build.TOOLS == (*server_build.TOOLS, server_build.RPC_SERVER)
    assert "-DGGML_RPC=ON" in tree_build.cmake_flags("cpu", generator=False)
    assert set(tree_build.TOOLS) < set(tree_build.TARGETS) and "llama" in tree_build.TARGETS


def test_cuda_flags_name_the_cards_architecture_alone_and_cpu_flags_no_gpu_backend():
    cuda = tree_build.cmake_flags("cuda", "90", generator=False)
    assert "-DGGML_CUDA=ON" in cuda and "-DCMAKE_CUDA_ARCHITECTURES=90" in cuda and "-DBUILD_SHARED_LIBS=ON" in cuda
    cpu = tree_build.cmake_flags("cpu", generator=False)
    assert "-DBUILD_SHARED_LIBS=ON" in cpu and not any(f.startswith("-DGGML_") and f != "-DGGML_RPC=ON" for f in cpu)


def _fake_tree(root: Path) -> Path:
    bin_ = root / "bin"
    bin_.mkdir(parents=True)
    for name in tree_build.TOOLS:
        (bin_ / name).write_text("#!/bin/sh\n")
        (bin_ / name).chmod(0o755)
    for name in tree_build.LIBS:
        (bin_ / name).write_bytes(b"")
    (bin_ / tree_build.MARKER).write_text("fake\n")
    return bin_


def test_lib_path_on_a_trees_bin_points_the_server_engine_and_the_tools_at_it(tmp_path, monkeypatch):
    bin_ = _fake_tree(tmp_path / "tree")
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(bin_))
    assert tree_build.complete(tmp_path / "tree")
    assert server_build.llama_cpp_libs() == bin_ and server_build.build_dir() == bin_
    binary, env = server_build.find_server(None)
    assert binary == bin_ / "llama-server" and env["LD_LIBRARY_PATH"].split(os.pathsep)[0] == str(bin_)
    tools = server_build.build_tools(tmp_path / "log", wanted=("llama-fit-params",))  # found: nothing compiled
    assert tools == {"llama-fit-params": bin_ / "llama-fit-params"} and not (tmp_path / "log").exists()
    monkeypatch.delenv("LLAMA_CPP_LIB_PATH")  # --server-bin of a tree binary: that tree's libraries
    assert server_build.find_server(bin_ / "llama-server")[1] == {"LD_LIBRARY_PATH": str(bin_)}
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(tmp_path))  # a library folder that is no tree: the usual cache
    assert server_build.build_dir() != tmp_path and server_build.llama_cpp_libs() == tmp_path


def test_build_tree_takes_one_backend():
    assert_user_error(invoke("build-tree", "--cpu", "--cuda"), "choose one backend")
    assert_user_error(invoke("build-tree", "--cpu", "--cuda-arch", "90"), "--cuda-arch goes with --cuda")


def test_cmake_options_name_the_variant_and_its_folder(isolated):
    """--cmake options: -DNAME=VALUE (or NAME=VALUE, or with a type), a name's last value, sorted by name; they go last
    on the configure line (the user's value in place of a tree's own) and into the tree's folder, so two variants and
    the plain tree sit side by side, whatever order the options came in."""
    options = tree_build.cmake_options(["-DGGML_OPENMP=OFF", "GGML_NATIVE=OFF", "-DGGML_OPENMP:BOOL=ON"])
    assert options == {"GGML_NATIVE": "OFF", "GGML_OPENMP": "ON"} and list(options) == ["GGML_NATIVE", "GGML_OPENMP"]
    assert tree_build.cmake_options(["GGML_OPENMP=ON", "GGML_NATIVE=OFF"]) == options
    plain, off = tree_build.tree_dir("cpu", "1"), tree_build.tree_dir("cpu", "1", {"GGML_OPENMP": "OFF"})
    assert plain.name == "tree-cpu" and off.name == "tree-cpu-GGML_OPENMP=OFF" and off.parent == plain.parent
    assert tree_build.tree_dir("cpu", "1", options).name == "tree-cpu-GGML_NATIVE=OFF,GGML_OPENMP=ON"
    odd = tree_build.tree_dir("cpu", "1", {"CMAKE_C_FLAGS": "-O2 -march=x86-64-v3"})  # a space: hashed, never a path
    assert odd.name.startswith("tree-cpu-cmake-") and " " not in odd.name
    flags = tree_build.cmake_flags("cpu", generator=False, options={"CMAKE_BUILD_TYPE": "RelWithDebInfo", "GGML_OPENMP": "OFF"})
    assert flags[-2:] == ["-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DGGML_OPENMP=OFF"] and "-DCMAKE_BUILD_TYPE=Release" not in flags
    assert "llama-app" not in tree_build.targets() and tree_build.targets({"LLAMA_BUILD_APP": "ON"})[-1] == "llama-app"
    assert tree_build.programs({"LLAMA_BUILD_APP": "on"})[-1] == "llama"  # the unified binary: `llama serve`


def test_build_tree_cmake_options_are_checked_and_find_their_own_tree(tmp_path):
    """Bad --cmake input is one line before anything compiles; a tree built with the options is found (nothing
    compiled), and the same folder asked for with other options is not that build."""
    assert_user_error(invoke("build-tree", "--cpu", "--cmake", "GGML_OPENMP"), "--cmake GGML_OPENMP", "-DNAME=VALUE")
    assert_user_error(invoke("build-tree", "--cpu", "--cmake", "-DBUILD_SHARED_LIBS=OFF"), "BUILD_SHARED_LIBS",
                      "set by build-tree")
    assert_user_error(invoke("build-tree", "--cpu", "--cmake", "-DGGML_CUDA=ON"), "use --cuda")
    bin_ = _fake_tree(tmp_path / "off")
    (bin_ / tree_build.MARKER).write_text('built with -DGGML_OPENMP=OFF\ncmake options: {"GGML_OPENMP": "OFF"}\n')
    assert tree_build.built_with(tmp_path / "off") == {"GGML_OPENMP": "OFF"}
    assert tree_build.complete(tmp_path / "off", {"GGML_OPENMP": "OFF"})  # else the command below would compile
    result = invoke("build-tree", "--cpu", "--cmake", "-DGGML_OPENMP=OFF", "--out", str(tmp_path / "off"))
    assert result.exit_code == 0 and f"LLAMA_CPP_LIB_PATH={bin_.resolve()}" in result.stdout, result.output
    assert "compiling" not in result.stderr
    assert not tree_build.complete(tmp_path / "off", {"GGML_OPENMP": "ON"}) and not tree_build.complete(tmp_path / "off")
    assert not tree_build.complete(tmp_path / "off", {"GGML_OPENMP": "OFF", "LLAMA_BUILD_APP": "ON"})  # no bin/llama


MAPS = ("from gguf_bench.runtimes.llama_cpp import backends; backends(); from pathlib import Path; "
        "print('\\n'.join(sorted({line.split()[-1] for line in Path('/proc/self/maps').read_text().splitlines() "
        "if '/libllama.so' in line or '/libggml' in line})))")


def test_one_cpu_build_runs_both_engines(cpu_tree, tiny_pairs, isolated):
    """The Python engine maps only the tree's libllama and ggml; `run --engine both` without --server-bin runs the
    tree's llama-server; the target alone's greedy text is the same in both engines (one ggml)."""
    env = {**os.environ, "LLAMA_CPP_LIB_PATH": str(cpu_tree)}
    assert (cpu_tree / "llama-fit-params").is_file() and (cpu_tree / "llama-gguf-split").is_file()
    mapped = subprocess.run([sys.executable, "-c", MAPS], env=env, capture_output=True, text=True, check=True)
    libs = mapped.stdout.split()
    assert {Path(p).name.split(".so")[0] for p in libs} >= {"libllama", "libggml", "libggml-base", "libggml-cpu"}, libs
    assert all(Path(p).resolve().parent == cpu_tree.resolve() for p in libs), libs
    run = subprocess.run([sys.executable, "-m", "gguf_bench.cli", "run", *pair_args(tiny_pairs["high"]), "-K", "3",
                          "-n", "16", "-t", "2", "-p", PROMPT, "--engine", "both", "--name", "tree"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    records = stored(isolated / "results" / "tree.jsonl")
    server = [r for r in records if r["config"].get("engine") == "server"]
    assert server and all(r["server"]["command"][0] == str(cpu_tree / "llama-server") for r in server)
    assert server[0]["metrics"]["text"] == records[0]["metrics"]["text"]  # target alone: python == server
