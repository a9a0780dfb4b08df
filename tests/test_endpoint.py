"""--engine endpoint (issue 57, 1): servers someone else started, measured over HTTP as any OpenAI-compatible client.
Two kinds run for real: llama-server (the project's own build), started here as "someone else's", with
--spec-type draft-simple and without; and llama-cpp-python's own server (its [server] extra), with prompt-lookup
decoding and without, which gives no acceptance: its records must say so instead of guessing."""

from __future__ import annotations

import http.server
import json
import re
import shlex
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from cli_helpers import assert_user_error, invoke, stored

from gguf_bench.measure.engines.endpoint import _chunk, at_length, describe
from gguf_bench.measure.engines.endpoint_figures import counted
from gguf_bench.measure.inputs.prompts import choose
from gguf_bench.runtimes.llama_cpp import Vocabulary
from gguf_bench.runtimes.llama_server import Launch, Server, Speculation, free_port
from gguf_bench.runtimes.server_build import find_server
from gguf_bench.runtimes.streamed import StreamedRequest

DOCS = Path(__file__).resolve().parent.parent / "docs" / "server.md"


@contextmanager
def llama_server(server_bin: Path, target: Path, draft: Path | None = None, k: int = 4, metrics: bool = True):
    """A llama-server as its owner would start it: draft-simple at K with a draft, plain without."""
    binary, env = find_server(server_bin)
    spec = Speculation("draft-simple", k) if draft else Speculation()
    with Server(Launch(binary, target, draft, spec, "0", "0", 512, 1), env) as server:
        yield server.base


@contextmanager
def llama_cpp_server(model: Path, lookup: bool = False):
    """llama-cpp-python's own server (`python -m llama_cpp.server`), with prompt-lookup decoding where asked."""
    pytest.importorskip("llama_cpp.server.app", reason="llama-cpp-python's [server] extra is not installed")
    port = free_port()
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--port", str(port), "--n_ctx", "512",
            "--n_threads", "1"] + (["--draft_model", "prompt-lookup-decoding", "--draft_model_num_pred_tokens", "4"]
                                   if lookup else [])
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "llama_cpp.server did not start"
            try:
                urllib.request.urlopen(url + "/v1/models", timeout=2).close()
                break
            except OSError:
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def docs_command(spec: str, base: str, name: str) -> list[str]:
    """docs/server.md's example command, pointed at these servers and this results name."""
    line = next(ln for ln in DOCS.read_text().splitlines() if ln.startswith("gguf-bench sweep --engine endpoint"))
    args = shlex.split(line)[1:]
    args[args.index("--url") + 1], args[args.index("--baseline-url") + 1] = spec, base
    args[args.index("--name") + 1] = name
    return args


def test_llama_server_pair_gives_its_own_acceptance_and_a_paired_gain(tiny_pairs, server_bin, isolated):
    """docs/server.md's command against two llama-servers: the records are the baseline's target alone and --url's
    speculative runs, alternating; acceptance and drafted tokens are the server's timings, its rounds and acceptance
    per position /metrics' (which add up to the same accepted tokens); the server says what it is."""
    target, draft = tiny_pairs["high"]
    with llama_server(server_bin, target, draft) as spec, llama_server(server_bin, target) as base:
        result = invoke(*docs_command(spec, base, "ep"))
    assert result.exit_code == 0, result.output
    records = stored(isolated / "results" / "ep.jsonl")
    assert {(r["mode"], r["config"]["clients"]) for r in records} == {(m, c) for m in ("target", "speculative")
                                                                       for c in (1, 2)}
    for r in records:
        ep, m, speculative = r["endpoint"], r["metrics"], r["mode"] == "speculative"
        assert r["error"] is None and r["config"]["engine"] == "endpoint" and r["order"]["design"] == "alternate"
        assert ep["url"] == (spec if speculative else base) and ep["llama_cpp"] and ep["speculative"] is speculative
        assert ep["timed_by"] == "server timings" and ep["tokens_from"] == "timings" and ep["not_available"] == []
        assert m["tokens_per_s"] > 0 and m["n_tokens"] == 32 * r["config"]["clients"]
        if speculative:
            assert ep["spec_types"] == "draft-simple" and r["config"]["strategy"]["spec_type"] == "draft-simple"
            assert m["drafted"] >= m["accepted"] > 0 and m["rounds"] > 0
            assert sum(m["accepted_at"]) == m["accepted"] and len(m["accepted_at"]) <= 4  # per position, K=4
    assert "endpoint" in result.stdout and "draft-simple" in result.stdout and "gain" in result.stdout


def test_prompts_are_made_that_many_tokens_long_as_the_server_counts_them(tiny_pairs, server_bin, isolated):
    """--prompt-tokens against someone else's servers: each prompt sized by the baseline server's own count (its chat
    template included), both servers process exactly that many tokens, and each length is its own workload; a prompt
    already that long is one line."""
    target, draft = tiny_pairs["high"]
    with llama_server(server_bin, target, draft) as spec, llama_server(server_bin, target) as base:
        args = ["sweep", "--engine", "endpoint", "--url", spec, "--baseline-url", base, "-n", "4", "-r", "1",
                "--prompt-ids", "code-short,chat-short"]
        result = invoke(*args, "--prompt-tokens", "200,120", "--name", "long")
        short = invoke(*args, "--prompt-tokens", "3", "--name", "short")
    assert result.exit_code == 0, result.output
    records = stored(isolated / "results" / "long.jsonl")
    assert len(records) == 2 * 2 * 2 and not [r["error"] for r in records if r["error"]]
    for r in records:
        assert r["metrics"]["prompt_tokens"] == r["config"]["prompt_length"], r["config"]
    assert {r["config"]["prompt_id"] for r in records} == {f"{p}@{n}" for p in ("code-short", "chat-short")
                                                           for n in (120, 200)}
    assert_user_error(short, "prompt code-short is already", "--prompt-tokens 3")


def test_llama_cpp_python_server_gives_tokens_per_s_and_says_acceptance_is_not_available(tiny_pairs, isolated):
    """The generic path, for real: llama-cpp-python's server has no timings, /props or /metrics, and its stream no
    usage; its tokens are -n where it stopped at the length asked, timed by the client; acceptance stays None."""
    target, _ = tiny_pairs["high"]
    with llama_cpp_server(target, lookup=True) as spec, llama_cpp_server(target) as base:
        result = invoke("sweep", "--engine", "endpoint", "--url", spec, "--baseline-url", base, "--prompt-ids",
                        "code-short,chat-short", "-n", "8", "-r", "2", "--name", "generic")
    assert result.exit_code == 0, result.output
    assert "gives no acceptance, drafted and accepted tokens, rounds" in result.stdout
    records = stored(isolated / "results" / "generic.jsonl")
    assert len(records) == 8 and {r["mode"] for r in records} == {"target", "speculative"}
    for r in records:
        ep, m = r["endpoint"], r["metrics"]
        assert r["error"] is None and not ep["llama_cpp"] and ep["speculative"] is None
        assert ep["timed_by"] == "client" and ep["tokens_from"] in ("length", "usage")
        assert any("acceptance" in line for line in ep["not_available"])
        assert m["tokens_per_s"] > 0 and m["acceptance"] is None and m["drafted"] is None and m["rounds"] is None
    assert "speculative" in result.stdout  # the row's label: the server's draft length is its own


def test_a_server_whose_stream_gives_no_usage_sizes_prompts_by_its_answers_usage(tiny_pairs, isolated):
    """--prompt-tokens against llama-cpp-python's server (no usage in its stream): each prompt is sized by a plain
    answer's usage, which the target's own tokenizer confirms here, and the sweep runs at that length."""
    target, _ = tiny_pairs["high"]
    prompt = choose("code-short", None)[0]
    with llama_cpp_server(target) as base, llama_cpp_server(target, lookup=True) as spec:
        sized = at_length(describe(base, "--baseline-url"), replace(prompt, id="code-short@200", length=200), 60)
        result = invoke("sweep", "--engine", "endpoint", "--url", spec, "--baseline-url", base, "--prompt-ids",
                        "code-short", "--prompt-tokens", "200", "-n", "4", "-r", "1", "--name", "sized")
    with Vocabulary(target) as vocab:
        assert len(vocab.tokenize(sized.text)) == 200 and sized.text.endswith(prompt.text)
    assert result.exit_code == 0, result.output
    rows = json.loads(invoke("report", str(isolated / "results" / "sized.jsonl"), "--format", "json").stdout)
    assert {row["prompt_length"] for row in rows} == {200} and {row["prompt_tokens"] for row in rows} == {200}


def test_r_auto_against_two_servers_repeats_only_open_verdicts_up_to_the_maximum(tiny_pairs, server_bin, isolated):
    """-r auto through --engine endpoint: two repetitions of every cell, then only the cells of verdicts still open,
    looking at most at --max-reps; every record carries the looks its intervals are corrected for; the last line says
    why it stopped."""
    target, draft = tiny_pairs["high"]
    with llama_server(server_bin, target, draft) as spec, llama_server(server_bin, target) as base:
        result = invoke("sweep", "--engine", "endpoint", "--url", spec, "--baseline-url", base, "--prompt-ids",
                        "code-short,chat-short", "-n", "8", "-r", "auto", "--max-reps", "3", "--name", "auto")
    assert result.exit_code == 0, result.output
    stop = r"^-r auto: (the verdicts the deploy lines rest on are decided|--max-reps 3 reached)"
    assert re.search(stop, result.stdout, re.M), result.stdout
    records = stored(isolated / "results" / "auto.jsonl")
    reps = [(r["mode"], r["config"]["repetition"]) for r in records]
    assert all(reps.count((m, rep)) == 2 for m in ("target", "speculative") for rep in (0, 1))  # 2 prompts each
    assert {rep for _, rep in reps} <= {0, 1, 2} and all(r["order"]["looks"] == 2 for r in records)


class NotOpenAI(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_bad_input_is_one_line(tiny_pairs, server_bin):
    """Unreachable, not OpenAI-compatible, one server twice, a baseline that drafts, a baseline serving another model,
    a missing URL, a pair beside the URLs: each one line and exit 1, before any cell runs."""
    target, draft = tiny_pairs["high"]
    other = tiny_pairs["low"][1]  # the noisiest draft: another model, which answers otherwise at temperature 0
    web = http.server.HTTPServer(("127.0.0.1", 0), NotOpenAI)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    nothing, not_openai = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{web.server_port}"

    def sweep(*args):
        return invoke("sweep", "--engine", "endpoint", "-n", "4", *args)

    with llama_server(server_bin, target, draft) as spec, llama_server(server_bin, other) as foreign:
        assert_user_error(sweep("--url", nothing, "--baseline-url", foreign), "cannot reach", nothing)
        assert_user_error(sweep("--url", not_openai, "--baseline-url", foreign), "not an OpenAI-compatible server",
                          "GET /v1/models answered 404")
        assert_user_error(sweep("--url", spec, "--baseline-url", spec + "/v1/"), "are the same server")
        assert_user_error(sweep("--url", foreign, "--baseline-url", spec), "the baseline", "drafts")
        assert_user_error(sweep("--url", spec, "--baseline-url", foreign), "the baseline serves another model",
                          "temperature 0 differ")
        assert_user_error(sweep("--url", spec), "give --url", "and --baseline-url")
        assert_user_error(invoke("sweep", "--url", spec, "--baseline-url", foreign), "--url is an option of endpoint",
                          "add --engine endpoint")
        assert_user_error(sweep("--url", spec, "--baseline-url", foreign, "--target", str(target), "--draft", str(draft)),
                          "give no pair")
        assert_user_error(invoke("tune", "--engine", "endpoint"), "tune cannot calibrate a server at --url")
    web.shutdown()


def test_a_server_that_dies_mid_sweep_fails_its_cells_and_the_sweep_exits_3(tiny_pairs, server_bin, isolated):
    """The speculative server is stopped while the sweep runs: the baseline's cells still measure, every speculative
    cell after the stop fails with its reason, and the sweep exits 3 (FAILED_CELLS), naming --resume."""
    target, draft = tiny_pairs["high"]
    binary, env = find_server(server_bin)
    out = isolated / "results" / "dies.jsonl"
    spec = Server(Launch(binary, target, draft, Speculation("draft-simple", 4), "0", "0", 512, 1), env)
    with spec, llama_server(server_bin, target) as base:
        args = [sys.executable, "-m", "gguf_bench.cli", "sweep", "--engine", "endpoint", "--url", spec.base,
                "--baseline-url", base, "--prompt-ids", "code-short", "-n", "64", "-r", "40", "--name", "dies"]
        sweep = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not (out.is_file() and len(stored(out)) >= 4) and time.monotonic() < deadline and sweep.poll() is None:
            time.sleep(0.05)
        spec.close()
        stdout, stderr = sweep.communicate(timeout=300)
    assert sweep.returncode == 3, stdout + stderr
    records = stored(out)
    failed = [r for r in records if r["error"]]
    assert failed and all(r["mode"] == "speculative" and spec.base in r["error"] for r in failed)
    assert all(r["error"] is None for r in records if r["mode"] == "target")
    assert re.search(r"\d+ cells? failed .*--resume", stderr)


# --- what the stream and the counters give, without a server ----------------------------------------


def test_a_stream_fills_its_answer_and_the_last_chunk_finishes_it():
    answer = StreamedRequest(0, "p", 8)
    chunks = [b'data: {"choices":[{"text":"a","index":0,"finish_reason":null}]}',
              b'data: {"choices":[{"text":"bc","index":0,"finish_reason":null}]}',
              b'data: {"choices":[{"text":"","index":0,"finish_reason":"length"}],"usage":{"completion_tokens":3},'
              b'"timings":{"predicted_n":3,"predicted_ms":30.0,"draft_n":4,"draft_n_accepted":2}}', b"data: [DONE]"]
    assert [_chunk(c.removeprefix(b"data: "), answer, 0.0) for c in chunks] == [False, False, False, True]
    assert answer.text == "abc" and answer.finish == "length" and answer.first_token_s <= answer.end_s
    assert (answer.predicted_n, answer.tokens_from) == (3, "timings") and answer.decode_s == pytest.approx(0.03)
    assert (answer.draft_n, answer.draft_n_accepted) == (4, 2)
    plain = StreamedRequest(1, "p", 8, first_token_s=1.0, end_s=2.0, finish="stop")
    assert (plain.predicted_n, plain.tokens_from) == (None, "") and plain.draft_n is None  # not told: never guessed


def test_metrics_count_for_a_cell_only_where_they_are_its_own():
    """/metrics' counters over a cell are read only when their drafted and accepted tokens equal the requests' own
    timings; the per-position series is kept apart from the totals."""
    before = {"spec_decode_num_drafts_total": 10, "spec_decode_num_draft_tokens_total": 40,
              "spec_decode_num_accepted_tokens_total": 20, "spec_decode_num_accepted_tokens_per_pos_total[0]": 8,
              "spec_decode_num_accepted_tokens_per_pos_total[1]": 5}
    after = {"spec_decode_num_drafts_total": 13, "spec_decode_num_draft_tokens_total": 52,
             "spec_decode_num_accepted_tokens_total": 25, "spec_decode_num_accepted_tokens_per_pos_total[0]": 11,
             "spec_decode_num_accepted_tokens_per_pos_total[1]": 7}
    mine = [StreamedRequest(0, "p", timings={"draft_n": 12, "draft_n_accepted": 5})]
    got = counted(before, after, mine)
    assert got.rounds == 3 and got.accepted_at == [3, 2]
    crowded = [StreamedRequest(0, "p", timings={"draft_n": 8, "draft_n_accepted": 5})]  # another client drafted 4 meanwhile
    assert counted(before, after, crowded).rounds is None and counted(None, after, mine).rounds is None


# --- what a client cannot set, and a file of other servers (no server needed: refused before any request) ----------


def test_options_the_servers_owner_sets_are_refused_not_ignored(isolated):
    """-K, -ngl, --spec-type are the server's own (set when it was started): given with --engine endpoint, one line
    names them, before any server is asked."""
    nothing = f"http://127.0.0.1:{free_port()}"
    result = invoke("sweep", "--engine", "endpoint", "--url", nothing, "--baseline-url", nothing, "-K", "4",
                    "-ngl", "99", "--spec-type", "ngram-simple")
    assert_user_error(result, "set by the server's owner", "leave them out")
    named = result.stderr.removeprefix("Error: ").split(":")[0]
    assert {"-K", "-ngl", "--spec-type"} == set(named.replace(",", " ").split()), result.stderr
    assert not (isolated / "results").exists() or not any((isolated / "results").iterdir())


def test_resume_against_other_servers_is_refused_not_mixed(isolated):
    """--resume keys name the served model, not the server: a file measured against other URLs (or by another engine)
    is refused in one line, and left as it was."""
    from gguf_bench.results.schema.parts.endpoint_identity import Endpoint
    from gguf_bench.results.schema.records import Mode, RunRecord
    from gguf_bench.results.schema.store import append_record

    out = isolated / "results" / "ep.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    spec, base, other = (f"http://127.0.0.1:{free_port()}" for _ in range(3))
    append_record(out, RunRecord(pair="m.gguf", mode=Mode.TARGET, cell="a", endpoint=Endpoint(url=base)))
    append_record(out, RunRecord(pair="m.gguf", mode=Mode.SPECULATIVE, cell="b", endpoint=Endpoint(url=spec)))
    before = out.read_bytes()

    def resume(url, baseline_url):
        return invoke("sweep", "--engine", "endpoint", "--url", url, "--baseline-url", baseline_url, "--name", "ep",
                      "--resume")
    assert_user_error(resume(other, base), f"measured --url {spec} against --baseline-url {base}", "would mix")
    assert_user_error(resume(base, spec), "would mix two servers' runs")  # the same two, swapped
    assert "cannot reach" in resume(spec, base).stderr  # its own servers: past the check, to the (absent) servers
    append_record(out, RunRecord(pair="m.gguf", mode=Mode.TARGET, cell="c"))  # a python-engine run in the file
    assert_user_error(resume(spec, base), "holds runs of another engine")
    assert out.read_bytes().startswith(before)
