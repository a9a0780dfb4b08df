"""llama.cpp's own fitting (runtimes/fit_params.py: llama-fit-params, built by `gguf-bench build-server`) on a build
without a GPU device, run for real: what it prints there and what `plan --compare-fit` says about it. On a GPU
build the comparison itself is checked in tests/test_offload.py."""

from __future__ import annotations

import pytest
from cli_helpers import assert_user_error, at_width, invoke, pair_args

from gguf_bench.models.offload_plan import MIB, tensor_bytes
from gguf_bench.models.parts import tensor_table
from gguf_bench.runtimes import fit_params, server_build, tree_build
from gguf_bench.runtimes.llama_cpp import gpu_devices

cpu_only = pytest.mark.skipif(bool(gpu_devices()), reason="a build with a GPU device: tests/test_offload.py compares")


@cpu_only
def test_without_a_gpu_device_llama_fit_params_sees_only_the_host(fit_params_bin, moe_pair):
    """Its estimate has the host row alone (every weight there), and its fit checks only host memory: it prints
    llama.cpp's default -ngl -1 whatever the budget, so there is nothing to compare."""
    est = fit_params.estimate(moe_pair[0], ["-c", "512", *fit_params.LOAD_FLAGS], fit_params_bin)
    assert [e.device for e in est] == [fit_params.HOST]
    weights = sum(tensor_bytes(t.type_name, t.shape) for t in tensor_table(moe_pair[0])[1])
    assert est[0].model == weights // MIB and est[0].compute >= 0
    proc = fit_params._run(fit_params_bin, ["-m", str(moe_pair[0]), "-c", "512", "-fitt", "1"])
    assert proc.returncode == 0, proc.stderr
    choice = fit_params.parse_choice(proc.stdout)
    assert (choice.n_ctx, choice.ngl, choice.overrides, choice.tensor_split) == (512, -1, (), ())


@cpu_only
def test_plan_compare_fit_on_a_cpu_build_says_there_is_nothing_to_compare(fit_params_bin, moe_pair, monkeypatch):
    if (fit_params_bin.parent / tree_build.MARKER).is_file():  # the CPU tree's: found where LLAMA_CPP_LIB_PATH names
        monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(fit_params_bin.parent))
    else:
        monkeypatch.setenv("GGUF_BENCH_CACHE", str(fit_params_bin.parents[2]))  # where build-server's fixture built it
    at_width(monkeypatch, 80)
    result = invoke("plan", *pair_args(moe_pair), "--vram", "520MiB", "--ctx", "512", "--compare-fit")
    assert result.exit_code == 0, result.output
    assert "-ncmoe" in result.output  # the plan itself
    said = " ".join(result.output.split()).split("experts stay on the CPU")[-1].strip()  # after the plan's caption
    assert said.startswith("llama-fit-params: llama.cpp's fitting needs a GPU device and this build has none")
    assert said.endswith("nothing to compare") and "Vulkan0" not in said, result.output


@pytest.mark.parametrize("silent_runs", [0, 1, 9])  # said at once; lost once, then said; never said
def test_a_fit_whose_reason_was_lost_runs_again(tmp_path, silent_runs):
    """llama-fit-params' exit(1) does not wait for its log thread, so a failure's reason is sometimes not printed
    (once in CI): the fit runs again, at most LOST_TRIES times. A stand-in script plays the binary (bookkeeping)."""
    calls = tmp_path / "calls"
    script = tmp_path / "llama-fit-params"
    script.write_text(f"#!/bin/sh\necho x >> {calls}\n[ $(wc -l < {calls}) -le {silent_runs} ] && exit 1\n"
                      "echo 'common_fit_params: failed to fit params to free device memory: abort' >&2\nexit 1\n")
    script.chmod(0o755)
    proc = fit_params._run_fit(script, [])
    assert proc.returncode == 1 and len(calls.read_text().split()) == min(silent_runs + 1, fit_params.LOST_TRIES)
    assert bool(fit_params._FAILED.search(proc.stderr)) == (silent_runs < fit_params.LOST_TRIES)


def test_compare_fit_needs_the_model_files(moe_pair):
    result = invoke("plan", "--target", "acme/none-GGUF:Q4_K_M", "--draft", str(moe_pair[1]), "--vram", "1GB",
                    "--compare-fit")
    assert_user_error(result, "--compare-fit needs the model file", "acme/none-GGUF:Q4_K_M")


@pytest.mark.parametrize(("cached", "wanted", "compiled"), [
    ((), ("llama-server",), ["llama-server", "llama-fit-params", "llama-gguf-split"]),  # a fresh cache: all, in one build
    (("llama-server", "llama-gguf-split"), ("llama-fit-params",), ["llama-fit-params"]),  # only the missing one
    (("llama-server", "llama-fit-params"), ("llama-gguf-split",), ["llama-gguf-split"]),  # a cache from before it
    (("llama-server",), ("llama-server",), None),  # there: nothing compiled
    (("llama-server", "llama-fit-params"), ("llama-server", "llama-fit-params"), None),
])
def test_build_tools_compiles_every_missing_tool_in_one_build(monkeypatch, cached, wanted, compiled):
    calls = []
    monkeypatch.setattr(server_build, "cached_binary",
                        lambda name=server_build.BINARY, rpc=False: name if name in cached else None)
    monkeypatch.setattr(server_build, "_compile", lambda names, log, jobs, rpc=False: calls.append(names))
    found = server_build.build_tools(server_build.build_dir() / "build.log", 2, wanted)
    assert calls == ([compiled] if compiled else []) and list(found) == list(wanted)


def test_build_tools_rpc_builds_the_cpu_tree_once_and_finds_its_tools_there(monkeypatch, tmp_path):
    """`build-server --rpc`: llama-server and ggml-rpc-server are the CPU tree's (one compile for the tree and RPC),
    never the build-server folder's."""
    monkeypatch.setenv("GGUF_BENCH_CACHE", str(tmp_path))
    monkeypatch.delenv("LLAMA_CPP_LIB_PATH", raising=False)
    calls = []
    monkeypatch.setattr(server_build, "_compile", lambda *a, **k: calls.append("build-server's own compile"))
    monkeypatch.setattr(tree_build, "build_tree", lambda backend, tree=None, jobs=None, cuda_arch=None, log=None:
                        calls.append(backend))
    found = server_build.build_tools(tmp_path / "build.log", 2, server_build.RPC_TOOLS, rpc=True)
    assert calls == ["cpu"]
    assert {p.parent for p in found.values()} == {tree_build.lib_dir(tree_build.tree_dir("cpu"))}
    assert server_build.build_dir(rpc=True) != server_build.build_dir()
