"""Two llama.cpp builds as two settings of one sweep (`--server-bin A,B`, issue 74): each load's server runs its own
binary, each record names the binary it ran, the summary keeps the builds apart (its `build` column) with each build's
speculative rows against its own target alone, and the deploy line's command is the chosen build's. The second build
here is the suite's own llama-server behind llama.cpp's unified `llama` (run as `llama serve`: tests/test_server.py's
stand-in), a file of its own with a sha256 of its own."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import re
from pathlib import Path

import pytest
from cli_helpers import assert_user_error, invoke, pair_args, stored
from test_server import LLAMA_APP, _script

from gguf_bench.runtimes.server_build import find_server


def _unified(server_bin, tmp_path):
    binary, env = find_server(server_bin)
    exports = "".join(f"export {k}={v}\n" for k, v in env.items())
    return _script(tmp_path / "app" / "llama", LLAMA_APP.format(env=exports, server=binary))


def test_two_builds_are_two_settings_of_one_sweep(tiny_pairs, server_bin, tmp_path, isolated):
    llama = _unified(server_bin, tmp_path)
    result = invoke("sweep", *pair_args(tiny_pairs["high"]), "--engine", "both", "--server-bin", f"{server_bin},{llama}",
                    "-K", "2", "-n", "8", "-t", "2", "-r", "2", "--prompt-ids", "code-short", "--name", "builds")
    assert result.exit_code == 0, result.output
    records = stored(isolated / "results" / "builds.jsonl")
    assert all(r["error"] is None for r in records), [r["error"] for r in records if r["error"]]
    server = [r for r in records if r["config"].get("engine") == "server"]
    python = [r for r in records if r["config"].get("engine") is None]
    # the Python loop runs no binary: its cells once, named by its own libllama, no --server-bin setting
    assert len(python) == 6 and all(r["config"]["server_bin"] is None for r in python)
    assert all(r["build"]["path"] not in (str(server_bin), str(llama)) for r in python)
    # each build: its target alone and K=2, twice; each record names the binary it ran, and ran it
    assert sorted((r["config"]["server_bin"], r["mode"]) for r in server) == sorted(
        (str(b), m) for b in (server_bin, llama) for m in ("target", "speculative") for _ in range(2))
    for r in server:
        assert r["build"]["path"] == r["config"]["server_bin"] and r["build"]["sha256"]
        assert r["server"]["command"][0] == r["config"]["server_bin"]
    assert {r["server"]["command"][1] for r in server if r["config"]["server_bin"] == str(llama)} == {"serve"}
    assert len({r["build"]["sha256"] for r in server}) == 2
    # the summary: a row per build and drafting, each speculative row's gain over its own build's target alone
    report = invoke("report", str(isolated / "results" / "builds.jsonl"), "--format", "csv")
    assert report.exit_code == 0, report.output
    rows = [r for r in csv.DictReader(io.StringIO(report.stdout)) if r["engine"] == "server"]
    assert sorted((r["server_bin"], r["mode"]) for r in rows) == sorted(
        (str(b), m) for b in (server_bin, llama) for m in ("target", "speculative"))
    assert all(r["gain_pct"] for r in rows if r["mode"] == "speculative")
    # the terminal table names the builds; the deploy line's command is the chosen build's own binary. Read from the
    # records with the machine's load made quiet: a busy CI machine would make the line 'none yet' (test_trust's case)
    assert "build" in result.stdout and str(llama) in result.stdout and str(server_bin) in result.stdout
    quiet = isolated / "results" / "quiet.jsonl"
    quiet.write_text("".join(json.dumps({**r, "load": _quiet(r["load"])}) + "\n" for r in records))
    answer = invoke("report", str(quiet))
    assert answer.exit_code == 0, answer.output
    commands = [line for line in answer.stdout.splitlines() if " -m " in line and "--spec-type" in line]
    assert commands and all(c.startswith((f"{server_bin} ", f"{llama} serve ")) for c in commands), answer.stdout
    # the deploy line names its build and its advantage over the same setting on the other build, paired
    head = " ".join(answer.stdout.split("deploy ", 1)[1].split(" -m ")[0].split())
    chosen, other = (server_bin, llama) if commands[0].startswith(f"{server_bin} ") else (llama, server_bin)
    assert f" on build {chosen} (" in head and re.search(rf"[+-]\d+% (\[[+-]\d+,[+-]\d+\] )?over (target alone|K=2) on "
                                                          rf"build {re.escape(str(other))}", head), head


def _quiet(load: dict | None) -> dict:
    """A run's machine load as a quiet machine's (the sweep ran beside whatever the CI machine does)."""
    wall = (load or {}).get("wall_s") or 0.01
    return {**(load or {}), "wall_s": wall, "cpu_s": wall, "main_cpu_s": wall, "others_cpu_s": 0.0, "steal_s": 0.0}


def test_a_server_bin_of_the_list_that_does_not_exist_is_one_line(tiny_pairs, server_bin, tmp_path, isolated):
    missing = tmp_path / "nowhere" / "llama-server"
    result = invoke("sweep", *pair_args(tiny_pairs["high"]), "--engine", "server", "--server-bin",
                    f"{server_bin},{missing}", "-K", "2", "-n", "4", "--name", "bad")
    assert_user_error(result, f"--server-bin {missing}", "not an executable file")
    result = invoke("sweep", *pair_args(tiny_pairs["high"]), "--engine", "server", "--server-bin",
                    f"{server_bin},{server_bin}", "-K", "2", "-n", "4", "--name", "twice")
    assert_user_error(result, "twice")


def test_builds_are_shown_by_what_tells_them_apart():
    """The printers name two builds by the parts that differ; paths that share nothing but the root stay whole; one
    build leaves the runs as they are."""
    import pandas as pd

    from gguf_bench.results.presentation.summary import build_names, with_build_names

    on, off = "/c/llama.cpp/tree-cpu/bin/llama-server", "/c/llama.cpp/tree-cpu-GGML_OPENMP=OFF/bin/llama-server"
    assert build_names([on, off]) == {on: "tree-cpu", off: "tree-cpu-GGML_OPENMP=OFF"}
    assert build_names(["/a/llama-server", "/b/c/llama"]) == {"/a/llama-server": "/a/llama-server", "/b/c/llama": "/b/c/llama"}
    assert build_names(["x/llama-server", "x/y/llama-server"]) == {"x/llama-server": "x", "x/y/llama-server": "x/y"}
    df = pd.DataFrame({"server_bin": [on, off, on, ""], "k": [0, 0, 4, 0]})
    assert list(with_build_names(df)["server_bin"]) == ["tree-cpu", "tree-cpu-GGML_OPENMP=OFF", "tree-cpu", ""]
    one = pd.DataFrame({"server_bin": [on, on]})
    assert with_build_names(one) is one


def _own_library() -> Path:
    """llama-cpp-python's own libllama folder (what the Python loop loads without --lib)."""
    return Path(importlib.util.find_spec("llama_cpp").origin).parent / "lib"


def test_two_libraries_are_two_settings_of_the_python_loop(tiny_pairs, server_bin, isolated):
    """--lib A,B (issue 74): the Python loop's build as an axis. Each build's loads run in a Python process of their own
    bound to its libllama (measure/engines/lib_process.py), each record names the library it loaded, and the summary
    pairs each K with its own build's target alone. The two builds: llama-cpp-python's own library and the suite's
    CPU tree (the folder of its llama-server)."""
    own, tree = _own_library(), server_bin.parent
    if not (tree / "libllama.so").is_file():
        pytest.skip(f"{tree} holds no libllama.so (a GPU build's llama-server is build-server's, linked to the venv's)")
    result = invoke("sweep", *pair_args(tiny_pairs["high"]), "--lib", f"{own},{tree}", "-K", "2", "-n", "8", "-t", "2",
                    "-r", "2", "--prompt-ids", "code-short", "--no-draft-alone", "--name", "libs")
    assert result.exit_code == 0, result.output
    records = stored(isolated / "results" / "libs.jsonl")
    assert all(r["error"] is None for r in records), [r["error"] for r in records if r["error"]]
    # each build: its target alone and K=2, twice, measured in turn (a repetition of both before the next)
    assert sorted((r["config"]["lib"], r["mode"]) for r in records) == sorted(
        (str(b), m) for b in (own, tree) for m in ("target", "speculative") for _ in range(2))
    reps = [r["config"]["repetition"] for r in records]
    assert reps == sorted(reps)
    # each record names the library its own process loaded (not the parent's), with that library's hash and system_info
    for r in records:
        assert r["build"]["path"] == str(Path(r["config"]["lib"]) / "libllama.so")
        assert r["build"]["sha256"] and r["build"]["system_info"]
    hashes = {r["config"]["lib"]: r["build"]["sha256"] for r in records}
    assert len(hashes) == 2 and len(set(hashes.values())) == 2
    assert all(r["build"]["sha256"] == hashes[r["config"]["lib"]] for r in records)
    # the summary: a row per build and mode, each K=2 over its own build's target alone
    report = invoke("report", str(isolated / "results" / "libs.jsonl"), "--format", "csv")
    assert report.exit_code == 0, report.output
    rows = list(csv.DictReader(io.StringIO(report.stdout)))
    assert sorted((r["server_bin"], r["mode"]) for r in rows) == sorted(
        (str(b), m) for b in (own, tree) for m in ("target", "speculative"))
    alone = {r["server_bin"]: r["tokens_per_s"] for r in rows if r["mode"] == "target"}
    assert all(r["baseline_tokens_per_s"] == alone[r["server_bin"]] and r["gain_pct"]
               for r in rows if r["mode"] == "speculative")
    # the terminal names the builds; the deploy line names its build and its advantage over the other build's (where
    # the machine let it choose: a busy one leaves 'none yet', naming the fastest row's build)
    assert "build" in result.stdout and str(own) in result.stdout and str(tree) in result.stdout
    head = " ".join(result.stdout.split("deploy ", 1)[1].split(" -m ")[0].split()) if "deploy " in result.stdout else ""
    if "none yet" in result.stdout:
        assert re.search(rf"the fastest measured setting, build ({re.escape(str(own))}|{re.escape(str(tree))}) ",
                         " ".join(result.stdout.split())), result.stdout
    else:
        chosen, other = (own, tree) if f" on build {own} (" in head else (tree, own)
        assert f" on build {chosen} (" in head and re.search(rf"[+-]\d+% (\[[+-]\d+,[+-]\d+\] )?over (target alone|K=2) "
                                                              rf"on build {re.escape(str(other))}", head), head
        if chosen == tree:  # the command: the llama-server beside the chosen library, where its build has one
            assert f"{tree / 'llama-server'} -m " in result.stdout, result.stdout


def test_a_lib_without_libllama_is_one_line(tiny_pairs, tmp_path, isolated):
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    args = [*pair_args(tiny_pairs["high"]), "-K", "2", "-n", "4", "--name", "bad"]
    assert_user_error(invoke("sweep", *args, "--lib", f"{_own_library()},{nowhere}"), f"--lib {nowhere}",
                      "no libllama.so")
    assert_user_error(invoke("sweep", *args, "--lib", f"{_own_library()},{_own_library() / 'libllama.so'}"), "twice")
    assert_user_error(invoke("sweep", *args, "--engine", "server", "--lib", str(_own_library())), "--lib")
