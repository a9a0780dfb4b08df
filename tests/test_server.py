"""The server engine on a real llama-server (built by `gguf-bench build-server` from the installed llama-cpp-python's
own sources, on its ggml): records, greedy text against the Python loop, resume, faults, and no orphan process."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import time

import pytest
from cli_helpers import GGUF_BENCH, assert_user_error, invoke, pair_args, processes_running, stored

from gguf_bench.errors import BenchError
from gguf_bench.measure.engines.server_options import ServerOptions
from gguf_bench.measure.inputs.prompts import Prompt
from gguf_bench.measure.plan import Grid
from gguf_bench.measure.sweep import iter_records
from gguf_bench.models.pairs import PairFiles
from gguf_bench.results.schema.records import RunRecord
from gguf_bench.results.schema.store import read_records
from gguf_bench.runtimes.llama_server import Launch, PortInUse, Server, Speculation
from gguf_bench.runtimes.server_build import find_server

PROMPT = "def fibonacci(n):"


def test_run_both_engines_tiny_pair(tiny_pairs, server_bin, isolated):
    """Both engines on one prompt: records say which engine made them and, for the server, the exact command line and
    build; the server confirmed its draft context; the target alone's greedy text is the same in both engines (the
    same ggml, the same one-token decodes); each engine's speculative text equals its own target alone's or says
    where it parts."""
    result = invoke("run", *pair_args(tiny_pairs["high"]), "-K", "3", "-n", "16", "-t", "2", "-p", PROMPT,
                    "--engine", "both", "--server-bin", str(server_bin), "--name", "both")
    assert result.exit_code == 0, result.output
    records = stored(isolated / "results" / "both.jsonl")
    engines = [(r["config"].get("engine") or "python", r["mode"]) for r in records]
    assert sorted(engines) == [("python", "draft"), ("python", "speculative"), ("python", "target"),
                               ("server", "speculative"), ("server", "target")]
    assert [e for e, _ in engines] == ["python"] * 3 + ["server"] * 2  # the engines take turns by repetition (one here)
    assert {r["order"]["settings"] for r in records} == {"settings-chunks"}  # a server's processes: one engine at a time
    by = dict(zip(engines, records))
    server_spec = by["server", "speculative"]
    assert server_spec["error"] is None and server_spec["server"]["speculative"] is True
    command = server_spec["server"]["command"]
    assert command[0] == str(server_bin) and "-md" in command and command[command.index("--spec-draft-n-max") + 1] == "3"
    assert "0c1e570" in server_spec["server"]["version"]
    m = server_spec["metrics"]
    assert m["verify"] == "sample-and-compare" and m["rounds"] > 0 and m["drafted"] >= m["accepted"] > 0
    assert sum(m["accepted_at"]) == m["accepted"]
    assert m["n_tokens"] == 16 and m["tokens_per_s"] > 0
    assert by["server", "target"]["metrics"]["text"] == by["python", "target"]["metrics"]["text"]  # python == server
    assert by["server", "target"]["order"]["design"] == "alternate" and by["python", "target"]["order"]["design"] == "shuffled"
    identity = m["identity"]
    assert identity["identical"] or identity["position"] is not None
    assert "python loop vs llama-server" in result.stdout and "identical in both engines" in result.stdout


def test_sweep_server_resume_runs_only_what_is_missing(tiny_pairs, server_bin, isolated):
    """A server sweep stores one record per cell (no draft-alone cells: the server has none); a resume runs nothing
    again; a cell whose server failed runs again on resume."""
    args = ["sweep", *pair_args(tiny_pairs["middle"]), "-K", "1,2", "-n", "8", "-t", "2", "--prompt-ids", "code-short",
            "--engine", "server", "--server-bin", str(server_bin), "--name", "srv"]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    out = isolated / "results" / "srv.jsonl"
    first = stored(out)
    assert sorted((r["mode"], r["config"]["k"]) for r in first) == [("speculative", 1), ("speculative", 2), ("target", 0)]
    assert {r["order"]["design"] for r in first} == {"alternate"}  # in a seeded order: no cell forced first
    # each greedy speculative run is compared with its target alone, made untimed where that had not run yet
    assert all(r["metrics"]["identity"] is not None for r in first if r["mode"] == "speculative")
    assert all(r["error"] is None and r["config"]["engine"] == "server" for r in first)
    assert invoke(*args, "--resume").exit_code == 0
    assert len(stored(out)) == 3
    # a failed cell (as a server that died leaves it) is run again, and only it
    first[1].update(error="llama-server died", metrics=None)
    out.write_text("".join(json.dumps(r) + "\n" for r in first))
    assert invoke(*args, "--resume").exit_code == 0
    again = stored(out)
    assert len(again) == 4 and again[-1]["cell"] == first[1]["cell"] and again[-1]["error"] is None


def test_sweep_whose_cells_fail_counts_them_and_exits_3(tiny_pairs, server_bin, isolated):
    """Every server of this sweep fails to start (a context of a billion tokens, refused by llama-server itself): the
    sweep stores an error record per cell, ends with one line counting them and naming --resume, and exits 3."""
    target, _ = tiny_pairs["high"]
    result = invoke("sweep", "--target", str(target), "--spec-type", "ngram", "-K", "1,2", "-n", "4", "--prompt-ids",
                    "code-short", "--engine", "server", "--server-bin", str(server_bin), "--ctx-size", "1000000000",
                    "--name", "failing")
    records = stored(isolated / "results" / "failing.jsonl")
    assert len(records) == 3 and all("llama-server failed to start" in r["error"] for r in records)
    assert result.exit_code == 3, result.output
    assert "3 cells failed" in result.stderr and "--name failing --resume" in result.stderr
    assert "Traceback" not in result.output


def test_server_that_dies_mid_group_keeps_every_record(tiny_pairs, server_bin, isolated):
    """Kill the target alone's llama-server after its first measured cell (the cells come in a shuffled order): the
    target alone's later cells get an error each, the speculative server, running beside it, measures every one of its
    cells; nothing is lost."""
    target, draft = tiny_pairs["high"]
    files = PairFiles(target, draft, "tiny")
    grid = Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=[Prompt("p", PROMPT)], repetitions=3,
                n_predict=8, threads=2, engines=("server",), engine_options=(ServerOptions(server_bin=server_bin),),
                loads="once")  # one process per setting for all three repetitions: the later ones find it dead
    records, killed = [], False
    for record in iter_records("s", files, grid):
        records.append(record)
        if record.mode.value == "target" and not killed:
            for pid in processes_running(server_bin, model=target, without=draft):  # not the speculative one
                os.kill(pid, signal.SIGKILL)
            killed = True
    assert sorted(r.mode.value for r in records) == ["speculative"] * 3 + ["target"] * 3
    alone = [r for r in records if r.mode.value == "target"]
    assert alone[0].error is None
    assert all(r.error and "llama-server" in r.error for r in alone[1:])
    assert all(r.error is None for r in records if r.mode.value == "speculative")


def test_no_server_outlives_a_killed_sweep(tiny_pairs, server_bin, isolated):
    """kill -9 of gguf-bench while a server runs: the server goes too (PR_SET_PDEATHSIG); the records written so far
    stay, and a resume finishes the sweep. (Each server of this sweep lives about a second on 2 cores: the test
    polls /proc often and kills as soon as it sees one.)"""
    env = {**os.environ, "GGUF_BENCH_RESULTS": str(isolated / "results")}
    args = ["sweep", *pair_args(tiny_pairs["high"]), "-K", "1,2,3", "-n", "64", "-t", "2", "--prompt-ids", "code-short",
            "-r", "6", "--engine", "server", "--server-bin", str(server_bin), "--name", "killed"]
    log = isolated / "sweep.log"
    with log.open("w") as out:
        proc = subprocess.Popen([*GGUF_BENCH, *args], env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    target = tiny_pairs["high"][0]
    while not (seen := processes_running(server_bin, model=target)) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    # what the poll saw (a second look may come after that server's group ended, before the next one started)
    assert seen, f"no llama-server seen running (sweep exit {proc.poll()}):\n{log.read_text()}"
    proc.kill()
    assert proc.wait() == -signal.SIGKILL  # killed mid-sweep, not finished
    deadline = time.monotonic() + 15
    while processes_running(server_bin, model=target) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not processes_running(server_bin, model=target)
    killed = isolated / "results" / "killed.jsonl"
    before = len(read_records(killed)) if killed.exists() else 0
    assert before < 6 * 4
    again = subprocess.run([*GGUF_BENCH, *args, "--resume"], env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    records = [r for r in read_records(killed) if isinstance(r, RunRecord)]
    assert len({r.cell for r in records if r.error is None}) == 6 * 4


def test_missing_and_old_binaries_are_one_line(tiny_pairs, tmp_path, isolated):
    result = invoke("run", *pair_args(tiny_pairs["high"]), "-n", "4", "-p", PROMPT, "--engine", "server",
                    "--server-bin", str(tmp_path / "nope"))
    assert_user_error(result, "--server-bin", "not an executable file")
    old = tmp_path / "llama-server"
    old.write_text("#!/bin/sh\necho 'usage: llama-server --draft-max N --draft-min N'\n")
    old.chmod(0o755)
    result = invoke("run", *pair_args(tiny_pairs["high"]), "-n", "4", "-p", PROMPT, "--engine", "server",
                    "--server-bin", str(old))
    assert_user_error(result, "too old", "--spec-draft-n-max", "build-server")


# llama.cpp's unified binary as its installers ship it (app/llama.cpp: `llama serve` runs llama-server's main with the
# rest of the line, `llama --version` prints the build, `llama --help` lists the commands), standing in here for one
# built from the vendored tree: its `serve` is the suite's own llama-server
LLAMA_APP = """#!/bin/sh
{env}case "$1" in
  serve|server) shift; exec {server} "$@" ;;
  version|--version) exec {server} --version ;;
  ""|help|--help) printf 'Usage: llama <command> [options]\\n\\nAvailable commands:\\n  serve           HTTP API server\\n' ;;
  *) echo "error: unknown command '$1'" >&2; exit 1 ;;
esac
"""


def _script(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_unified_llama_binary_runs_as_llama_serve(tiny_pairs, server_bin, tmp_path, isolated, monkeypatch):
    """With no llama-server on PATH and none built, llama.cpp's `llama` on PATH is found and run as `llama serve`, its
    version read by `llama serve --version`; a `llama` of another program is passed over; --server-bin naming it runs
    it the same way, and the same binary under another name is one line saying what to call it."""
    binary, env = find_server(server_bin)
    exports = "".join(f"export {k}={v}\n" for k, v in env.items())
    other = _script(tmp_path / "other" / "llama", "#!/bin/sh\necho 'usage: llama [-h] {model,stack,download}'\n")
    monkeypatch.setenv("PATH", f"{other.parent}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.delenv("LLAMA_CPP_LIB_PATH", raising=False)
    with pytest.raises(BenchError, match="no llama-server found"):
        find_server(None)
    llama = _script(tmp_path / "app" / "llama", LLAMA_APP.format(env=exports, server=binary))
    monkeypatch.setenv("PATH", f"{llama.parent}{os.pathsep}{other.parent}{os.pathsep}/usr/bin{os.pathsep}/bin")
    assert find_server(None) == (llama, {}) and find_server(llama)[0] == llama
    result = invoke("run", *pair_args(tiny_pairs["high"]), "-K", "2", "-n", "8", "-t", "2", "-p", PROMPT,
                    "--engine", "server", "--name", "app")
    assert result.exit_code == 0, result.output
    records = stored(isolated / "results" / "app.jsonl")
    assert sorted(r["mode"] for r in records) == ["speculative", "target"] and all(r["error"] is None for r in records)
    spec = next(r for r in records if r["mode"] == "speculative")
    assert spec["server"]["command"][:4] == [str(llama), "serve", "-m", str(tiny_pairs["high"][0])]
    assert spec["server"]["speculative"] is True and spec["metrics"]["drafted"] > 0
    assert "0c1e570" in spec["server"]["version"]  # `llama serve --version`
    # the build it names: the version line's, the binary that ran (the unified one), the server's system_info
    build = spec["build"]
    assert build["path"] == str(llama) and build["commit"].startswith("0c1e570") and build["version"]
    assert build["sha256"] == hashlib.sha256(llama.read_bytes()).hexdigest() and "CPU :" in build["system_info"]
    renamed = _script(tmp_path / "renamed" / "llama-b1234", llama.read_text())
    result = invoke("run", *pair_args(tiny_pairs["high"]), "-n", "4", "-p", PROMPT, "--engine", "server",
                    "--server-bin", str(renamed))
    assert_user_error(result, "unified binary", "`llama`")


def test_strategies_the_server_cannot_run_are_refused(tiny_pairs, server_bin, isolated):
    result = invoke("run", *pair_args(tiny_pairs["high"]), "-n", "4", "-p", PROMPT, "--engine", "server",
                    "--server-bin", str(server_bin), "--k-schedule", "heuristic")
    assert_user_error(result, "fixed K", "--engine python")


def test_port_in_use_and_load_failure(tiny_pairs, server_bin, isolated):
    """A port another program holds: one line saying so (and a free port is chosen when none was given); a model
    the server cannot load (a context of a billion tokens): the run fails with the server's own reason."""
    target, _ = tiny_pairs["high"]
    binary, env = find_server(server_bin)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        launch = Launch(binary, target, None, Speculation(), "0", "0", 256, 2, port=port)
        with pytest.raises(PortInUse, match=f"port {port}"):
            Server(launch, env)
    result = invoke("run", "--target", str(target), "--spec-type", "ngram", "-n", "4", "-p", PROMPT, "--engine", "server",
                    "--server-bin", str(server_bin), "--ctx-size", "1000000000", "--name", "huge")
    assert_user_error(result, "llama-server failed to start", "exited with code")
    assert not processes_running(server_bin, model=target)


@pytest.mark.slow
def test_server_engine_on_gemma(gemma_pair, server_bin, isolated):
    """The default pair in both engines: the same greedy text from the target alone, and the server's speculative text
    equal to its own target alone's (or where it parts, said)."""
    result = invoke("run", *pair_args(gemma_pair), "-K", "4", "-n", "24", "-t", "2", "-p", PROMPT, "--engine", "both",
                    "--server-bin", str(server_bin), "--name", "gemma")
    assert result.exit_code == 0, result.output
    records = stored(isolated / "results" / "gemma.jsonl")
    by = {(r["config"].get("engine") or "python", r["mode"]): r for r in records}
    assert by[("python", "target")]["metrics"]["text"] == by[("server", "target")]["metrics"]["text"]
    spec = by[("server", "speculative")]["metrics"]
    assert spec["acceptance"] > 0.3 and spec["identity"] is not None
    assert spec["identity"]["identical"] or spec["identity"]["position"] is not None

