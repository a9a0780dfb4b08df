"""What people deploy, on a real llama-server: every --spec-type that needs no special model, several clients on
several slots, the command line that reproduces the best cell (started from its printed text), and faults under load."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from cli_helpers import assert_user_error, invoke, pair_args, processes_running, stored

from gguf_bench.measure.deploy import command_line
from gguf_bench.measure.engines.server_options import ServerOptions
from gguf_bench.measure.inputs.prompts import Prompt
from gguf_bench.measure.plan import Grid, cells_done
from gguf_bench.measure.sweep import iter_records
from gguf_bench.models.pairs import PairFiles
from gguf_bench.results.schema.records import parse
from gguf_bench.runtimes.llama_cpp import Vocabulary
from gguf_bench.runtimes.llama_server import Launch, Sampling, Server, Speculation, free_port, wait_healthy
from gguf_bench.runtimes.server_clients import run_round

PLAIN_TYPES = ["draft-simple", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"]
REPEATING = "one two three four five six seven eight nine ten " * 6  # gives the n-gram types something to find


def prompts_file(tmp: Path, *texts: str) -> Path:
    path = tmp / "prompts.jsonl"
    path.write_text("".join(json.dumps({"id": f"p{i}", "prompt": t}) + "\n" for i, t in enumerate(texts)))
    return path


def server_sweep(files, server_bin, name, *extra) -> list[str]:
    return ["sweep", *pair_args(files), "-n", "24", "-t", "2", "--engine", "server", "--server-bin", str(server_bin),
            "--name", name, *extra]


def test_every_plain_spec_type_in_one_sweep(tiny_pairs, server_bin, isolated):
    """One sweep over llama-server's six types that need no special model: each ran with its own size flags, drafted
    through a draft context, and says whether its n-gram state started cold."""
    result = invoke(*server_sweep(tiny_pairs["middle"], server_bin, "types", "-K", "3",
                                  "--prompts", str(prompts_file(isolated, REPEATING)), "--spec-type", ",".join(PLAIN_TYPES)))
    assert result.exit_code == 0, result.output
    records = [r for r in stored(isolated / "results" / "types.jsonl") if r["mode"] == "speculative"]
    by_type = {r["config"]["strategy"]["spec_type"]: r for r in records}
    assert sorted(by_type) == sorted(PLAIN_TYPES) and len(records) == len(PLAIN_TYPES)
    for spec_type, r in by_type.items():
        assert r["error"] is None and r["server"]["speculative"] is True, r
        cmd = r["server"]["command"]
        assert cmd[cmd.index("--spec-type") + 1] == spec_type
        assert r["server"]["pool"] == ("cold" if spec_type in ("ngram-mod", "ngram-map-k", "ngram-map-k4v", "ngram-cache")
                                       else None)
    assert by_type["ngram-cache"]["config"]["k"] == 8  # it drafts at most 8, whatever -K says
    assert "-md" in by_type["draft-simple"]["server"]["command"] and "-md" not in by_type["ngram-mod"]["server"]["command"]
    mod = by_type["ngram-mod"]["server"]["command"]
    assert mod[mod.index("--spec-ngram-mod-n-max") + 1] == "3"
    simple = by_type["ngram-simple"]["server"]["command"]
    assert simple[simple.index("--spec-ngram-simple-size-m") + 1] == "3"
    assert by_type["draft-simple"]["metrics"]["drafted"] > 0


def test_types_the_files_cannot_serve_are_one_line(tiny_pairs, server_bin, isolated):
    files = tiny_pairs["middle"]
    result = invoke(*server_sweep(files, server_bin, "mtp", "-K", "2", "--spec-type", "draft-mtp"))
    assert_user_error(result, "draft-mtp", "MTP/NextN", files[0].name)
    result = invoke(*server_sweep(files, server_bin, "eagle", "-K", "2", "--spec-type", "draft-eagle3"))
    assert_user_error(result, "draft-eagle3", "eagle3 sidecar")
    result = invoke("sweep", *pair_args(files), "-K", "2", "--spec-type", "ngram-mod", "--name", "py")
    assert_user_error(result, "ngram-mod", "--engine server")
    result = invoke("sweep", *pair_args(files), "-K", "2", "--parallel", "2", "--name", "py2")
    assert_user_error(result, "one stream", "--engine server")


def test_two_clients_on_two_slots_keep_each_request_and_the_aggregate(tiny_pairs, server_bin, isolated):
    """-np 2 with two clients: every round keeps both requests; the aggregate is their sum over the round's wall time,
    acceptance their pooled figure; nothing is lost; report shows the concurrency and where speculation stops paying."""
    texts = ["def fibonacci(n):", "The capital of France is"]
    result = invoke(*server_sweep(tiny_pairs["high"], server_bin, "np", "-K", "3", "-r", "2", "--parallel", "1,2",
                                  "--prompts", str(prompts_file(isolated, *texts))))
    assert result.exit_code == 0, result.output
    records = stored(isolated / "results" / "np.jsonl")
    assert len(records) == 2 * 2 * 2 * 2  # slots 1,2 x target/speculative x 2 prompts x 2 rounds
    for r in records:
        m, cfg = r["metrics"], r["config"]
        assert r["error"] is None and cfg["clients"] == cfg["parallel"] and len(m["requests"]) == cfg["clients"]
        requests = m["requests"]
        assert all(q["error"] is None and q["predicted_n"] == 24 for q in requests)
        assert m["n_tokens"] == sum(q["predicted_n"] for q in requests)
        assert m["tokens_per_s"] == pytest.approx(m["n_tokens"] / m["decode_s"])
        assert {q["prompt_id"] for q in requests} == ({"p0", "p1"} if cfg["clients"] == 2 else {cfg["prompt_id"]})
        latencies = [q["end_s"] - q["sent_s"] for q in requests]
        assert m["latency_p50_s"] <= m["latency_p95_s"] <= max(latencies) + 1e-9
        assert all(0 < q["first_token_s"] - q["sent_s"] <= lat for q, lat in zip(requests, latencies))
        if r["mode"] == "speculative":
            assert m["drafted"] == sum(q["draft_n"] for q in requests) > 0
            assert m["accepted"] == sum(q["draft_n_accepted"] for q in requests)
            assert m["rounds"] > 0 and "-np" in r["server"]["command"]
            assert r["server"]["command"][r["server"]["command"].index("-np") + 1] == str(cfg["parallel"])
    text = " ".join(result.output.split())
    assert "clients" in text and "K=3 gains" in text and "at 1 client" in text and "at 2 clients" in text, result.output
    # the crossover map: each slot count's best speculative setting (or why none), where speculation stops paying, and
    # a deploy line per slot count whose command runs that many slots
    assert " per slot count: " in text and "1 slot: " in text and "2 slots: " in text, result.output
    # where it stops paying, whichever way these tiny models' timings fell (thousands of tokens/s: noise decides)
    assert "speculation pays " in text or "no gain told from zero at any slot count" in text, result.output
    # a deploy line per slot count (the records' machine load left out: a busy machine's rows recommend nothing)
    quiet = isolated / "quiet.jsonl"
    quiet.write_text("".join(json.dumps({**r, "load": None}) + "\n" for r in records))
    report = invoke("report", str(quiet))
    assert report.exit_code == 0, report.output
    lines = report.output.splitlines()
    deploys = [ln for ln in lines if ln.startswith("deploy ")]
    assert len(deploys) == 2 and any(" at 1 slot" in d for d in deploys) and any(" at 2 slots" in d for d in deploys)
    # each deploy line's command: the first llama-server line after it (a deploy line that says why it deploys no draft
    # may fold over several lines, whichever way the timings fell)
    commands = [next(c for c in lines[i + 1:] if "llama-server" in c and " -np " in c)
                for i, ln in enumerate(lines) if ln.startswith("deploy ")]
    assert sorted(c.split(" -np ")[1].split()[0] for c in commands) == ["1", "2"], commands


def _start_printed(line: str, port: int) -> tuple[subprocess.Popen, str]:
    """Start the printed command line as a user would paste it (environment assignments first), on `port`."""
    words = shlex.split(line)
    env = dict(os.environ)
    while "=" in words[0] and not words[0].startswith("/"):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    words[words.index("--port") + 1] = str(port)
    proc = subprocess.Popen(words, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    if wait_healthy(base, 120, lambda: proc.poll() is None):
        return proc, base
    assert proc.poll() is None, f"the printed command exited with {proc.returncode}: {line}"
    proc.kill()
    raise AssertionError("the printed command did not become ready")


def _deploy_line(isolated: Path, name: str) -> tuple[str, dict, dict]:
    """report's printed deploy line, the --format json row that carries it, and a record of that row's cell. The
    records' machine load is left out first: another process busy during the sweep flags its rows, and a busy row
    recommends nothing (tests/test_trust.py tests that), which left no deploy line to check here."""
    path = isolated / "results" / f"{name}.jsonl"
    path.write_text("".join(json.dumps({**r, "load": None}) + "\n" for r in stored(path)))
    report = invoke("report", str(path))
    assert report.exit_code == 0, report.output
    lines = report.stdout.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("deploy "))
    printed = next(ln for ln in lines[at + 1:] if not ln.startswith("  "))  # after the headline's folded lines
    assert "-lv" not in printed and "--metrics" not in printed and "--port 8080" in printed and "-ngl 0" in printed
    as_json = json.loads(invoke("report", str(isolated / "results" / f"{name}.jsonl"), "--format", "json").stdout)
    best = [row for row in as_json if row.get("deploy")]
    assert len(best) == 1 and best[0]["deploy"] == printed
    record = next(r for r in stored(isolated / "results" / f"{name}.jsonl")
                  if r["mode"] == best[0]["mode"] and r["config"]["k"] == best[0]["k"])
    return printed, best[0], record


def _serve_printed(line: str, tokens: list[int], n_predict: int) -> tuple[bool, dict]:
    """Start the printed line, ask /slots whether it speculates, generate once at T=0: (speculative, timings)."""
    proc, base = _start_printed(line, free_port())
    try:
        with urllib.request.urlopen(base + "/slots", timeout=10) as r:
            speculative = json.loads(r.read())[0]["speculative"]
        body = {"prompt": tokens, "n_predict": n_predict, "temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
                "samplers": ["top_k", "temperature", "top_p"], "cache_prompt": False}
        req = urllib.request.Request(base + "/completion", json.dumps(body).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            return speculative, json.loads(r.read())["timings"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_where_nothing_gains_the_deploy_line_is_the_target_alone(tiny_pairs, server_bin, isolated):
    """Tiny models verify no faster than they decode: no speculative row gains, so the line printed is the target
    alone's (never a slower setting), and started from its text it runs without a draft context."""
    target, draft = tiny_pairs["low"]
    result = invoke(*server_sweep((target, draft), server_bin, "dep", "-K", "4",
                                  "--prompts", str(prompts_file(isolated, "def fibonacci(n):"))))
    assert result.exit_code == 0, result.output
    printed, best, _ = _deploy_line(isolated, "dep")
    assert best["mode"] == "target" and "--spec-type none" in printed and "-md" not in printed
    with Vocabulary(target) as vocab:
        tokens = vocab.tokenize("def fibonacci(n):")
    speculative, timings = _serve_printed(printed, tokens, 16)
    assert speculative is False and timings["predicted_n"] == 16 and "draft_n" not in timings


@pytest.mark.slow
def test_the_printed_deploy_line_speculates_and_gives_the_records_acceptance(gemma_pair, server_bin, isolated):
    """On the real gemma pair: report prints the best cell's llama-server command (--format json carries the same
    line); a speculative cell's command, written by the same code (deploy.command_line), started from that very text
    speculates (/slots) and, at T=0 on the same prompt, drafts and accepts exactly what the record did. Which cell is
    best is a matter of this machine's speed (K=4 gained +29% here, and lost -7% in another run minutes apart, as the
    target alone's own speed swung 39-52 tokens/s): the test asserts what holds either way."""
    target, draft = gemma_pair
    text = "def fibonacci(n):"
    result = invoke(*server_sweep((target, draft), server_bin, "dep", "-K", "4", "-n", "32",
                                  "--prompts", str(prompts_file(isolated, text))))
    assert result.exit_code == 0, result.output
    printed, best, _ = _deploy_line(isolated, "dep")
    record = next(r for r in stored(isolated / "results" / "dep.jsonl") if r["mode"] == "speculative")
    line = command_line(parse(record))
    if best["mode"] == "speculative":  # speculation paid on this machine: the printed line is this very line
        assert best["gain_pct"] > 0 and printed == line, (best, printed, line)
    else:  # it did not: the target alone, never a slower setting
        assert best["mode"] == "target" and "--spec-type none" in printed, (best, printed)
    assert "--spec-draft-n-max 4" in line and "-md " in line
    with Vocabulary(target) as vocab:
        tokens = vocab.tokenize(text)
    speculative, timings = _serve_printed(line, tokens, 32)
    assert speculative is True
    assert timings["predicted_n"] == record["metrics"]["n_tokens"]
    assert timings["draft_n"] == record["metrics"]["drafted"]
    assert timings["draft_n_accepted"] == record["metrics"]["accepted"]


def _server(files, server_bin, parallel: int, n_ctx: int = 4096) -> Server:
    from gguf_bench.runtimes.server_build import find_server

    binary, env = find_server(server_bin)
    launch = Launch(binary, files[0], files[1], Speculation("draft-simple", 3), "0", "0", n_ctx, 2, parallel=parallel)
    return Server(launch, env)


def test_a_client_that_disconnects_mid_response_leaves_the_server_serving(tiny_pairs, server_bin):
    """A deadline passed mid-answer: the client disconnects, says after how many tokens, and the next round on the same
    server is answered in full (its slots were freed)."""
    with Vocabulary(tiny_pairs["high"][0]) as vocab:
        prompt = vocab.tokenize("def fibonacci(n):")
    with _server(tiny_pairs["high"], server_bin, parallel=2) as server:
        cut = run_round(server, [("a", prompt), ("b", prompt)], 3500, Sampling(), timeout_s=0.5)
        assert all(r.error and "disconnected after" in r.error for r in cut.requests), cut.requests
        assert server.alive()
        full = run_round(server, [("a", prompt), ("b", prompt)], 16, Sampling(), timeout_s=60)
        assert [r.error for r in full.requests] == [None, None] and [r.predicted_n for r in full.requests] == [16, 16]


def test_a_server_that_dies_with_requests_in_flight(tiny_pairs, server_bin, isolated):
    """SIGKILL to llama-server during a round of two clients: that round and the rest of its group are kept as
    failed records, each with one line; the next group gets a new server; no server is left; resume re-runs only
    the failed rounds."""
    files = PairFiles(*tiny_pairs["high"], "tiny")
    grid = Grid(ks=[2], ngls=[0], nglds=[0], temperatures=[0.0], prompts=[Prompt("p", "def fibonacci(n):")],
                repetitions=2, n_predict=3500, n_ctx=4096, threads=2, engines=("server",),
                engine_options=(ServerOptions(server_bin=server_bin),),
                parallels=[2], loads="once")  # one server for both repetitions: the second round finds it dead
    killed = threading.Event()

    def killer():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed.is_set():
            pids = processes_running(server_bin, model=files.target)
            if pids:
                time.sleep(1.0)  # loaded and answering the first round
                for pid in processes_running(server_bin, model=files.target):
                    os.kill(pid, signal.SIGKILL)
                killed.set()
            time.sleep(0.02)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    records = list(iter_records("s", files, grid))
    thread.join()
    assert killed.is_set()
    target = [r for r in records if r.mode.value == "target"]
    spec = [r for r in records if r.mode.value == "speculative"]
    assert len(target) == 2 and len(spec) == 2 and all(r.error is None for r in spec)
    assert "requests failed" in target[0].error and "llama-server" in target[0].error
    assert "died earlier" in target[1].error
    assert not processes_running(server_bin, model=files.target)
    assert cells_done(records) == {r.cell for r in spec}  # --resume leaves these, runs the failed rounds again


def test_ngram_mod_on_a_prompt_shorter_than_its_match_drafts_nothing_and_says_so(tiny_pairs, server_bin, isolated):
    """ngram-mod looks up the last 24 tokens in a pool that starts empty in a cold process: on a prompt of a few
    tokens and 24 generated it cannot draft. Its records say so with the reason, the table shows 'no drafts' for it
    (never a gain or a best K), and the deploy line is not it."""
    result = invoke(*server_sweep(tiny_pairs["high"], server_bin, "mod", "-K", "4", "-r", "2", "--spec-type", "ngram-mod",
                                  "--prompts", str(prompts_file(isolated, "def f(n):"))))
    assert result.exit_code == 0, result.output
    mod = [r for r in stored(isolated / "results" / "mod.jsonl") if r["mode"] == "speculative"]
    assert len(mod) == 2 and all(r["error"] is None and r["server"]["speculative"] is True for r in mod)
    for r in mod:
        m = r["metrics"]
        assert m["drafted"] == 0 and m["rounds"] == 0 and m["n_tokens"] == 24
        assert m["prompt_tokens"] < 24 and f"the prompt ({m['prompt_tokens']} tokens) is shorter than ngram-mod's match" \
            in m["no_drafts"]
    report = invoke("report", str(isolated / "results" / "mod.jsonl"))
    assert report.exit_code == 0, report.output
    row = next(ln for ln in report.stdout.splitlines() if "ngram-mod K=4" in ln and "no drafts:" not in ln)
    assert "no drafts" in row and "★" not in row and "%" not in row.split()[-2:][0]
    assert "no drafts: ngram-mod K=4 drafted no token, so it measured the target alone: the prompt" in " ".join(
        report.stdout.split())
    assert not any(ln.startswith("deploy ") and "ngram-mod" in ln for ln in report.stdout.splitlines())
    as_json = json.loads(invoke("report", str(isolated / "results" / "mod.jsonl"), "--format", "json").stdout)
    row = next(r for r in as_json if r["mode"] == "speculative")
    assert row["no_drafts"] and row["gain_pct"] is None and row["best_k"] is False and row["deploy"] is None
    # the target alone's line, unless the machine was busy (then none: a busy machine recommends nothing)
    assert all(r["mode"] == "target" and "--spec-type none" in r["deploy"] for r in as_json if r["deploy"])
