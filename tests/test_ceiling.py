"""The memory-bandwidth ceiling (issue 64, item 5): bytes per token from the headers and the records' counts, each row's
share of the stored bandwidth, `gguf-bench machine`; and steps beside speed (item 4): steps/s x tokens per step is
tokens/s. Arithmetic on fake numbers and tiny generated GGUF files: nothing is timed, no model is loaded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from cli_helpers import invoke, pair_args

from gguf_bench.measure.flows import bandwidth
from gguf_bench.models import reads
from gguf_bench.models.parts import tensor_table
from gguf_bench.models.reads import StepBytes
from gguf_bench.results.predictions import ceiling
from gguf_bench.results.schema.records import parse
from gguf_bench.results.schema.run_fields import decode_steps, run_row

MB = 10**6


# --- the arithmetic -----------------------------------------------------------------------------------


def test_a_dense_step_reads_its_weights_and_the_kv_so_far():
    s = StepBytes(weights=100 * MB, kv_per_position=1000)
    assert s.step(context=2000) == 100 * MB + 2 * MB
    assert s.step(context=2000, positions=5) == s.step(context=2000)  # a verify batch reads the weights once


def test_a_moe_step_reads_the_used_experts_and_a_batch_their_union():
    s = StepBytes(weights=10 * MB, experts=80 * MB, n_expert=8, n_expert_used=2)
    assert s.step(0) == pytest.approx(10 * MB + 20 * MB)  # 2 of 8 experts a token
    # K+1 = 3 positions routing independently: an expert is read unless all three miss it: 1 - (6/8)^3 of them
    assert s.experts_read(3) == pytest.approx(80 * MB * (1 - 0.75**3))
    assert s.experts_read(100) == pytest.approx(80 * MB)  # a long batch reads about every expert


def test_sliding_window_layers_read_at_most_their_window():
    s = StepBytes(weights=0, kv_per_position=600, swa_kv_per_position=500, window=512)
    assert s.kv_read(100) == 600 * 100
    assert s.kv_read(4096) == 100 * 4096 + 500 * 512


def test_bytes_per_token_of_a_speculative_round_and_its_share_of_the_ceiling():
    target, draft = StepBytes(weights=1000 * MB), StepBytes(weights=100 * MB)
    round_bytes = reads.speculative_round(target, draft, context=0, drafted=4)  # target once, draft 4 times
    assert round_bytes == pytest.approx(1400 * MB)
    per_token = reads.per_token(round_bytes, tau=3.5)
    assert per_token == pytest.approx(400 * MB)
    # 20 tokens/s x 400 MB = 8 GB/s of 16 GB/s
    assert ceiling.ceiling_pct(20, per_token, 16) == pytest.approx(50)
    assert ceiling.ceiling_tokens_per_s(per_token, 16) == pytest.approx(40)
    assert reads.speculative_round(target, None, 0, 4) == pytest.approx(1000 * MB)  # an n-gram drafter reads nothing
    assert ceiling.ceiling_pct(None, per_token, 16) is None and ceiling.ceiling_pct(20, per_token, float("nan")) is None
    assert reads.per_token(1.0, 0) is None


def test_header_bytes_of_a_tiny_moe_model(moe_pair):
    target, _ = moe_pair
    meta, tensors = tensor_table(target)
    s = reads.from_header(meta, tensors)
    assert (s.n_expert, s.n_expert_used) == (8, 2) and s.experts > 0
    # every weight is read by some step but the input embedding's rows (one a token): weights + experts is the file's
    # tensors without token_embd (tied: the output layer's copy is counted instead)
    assert s.weights + s.experts <= target.stat().st_size
    assert s.step(0) < s.weights + s.experts  # a token reads a quarter of the experts
    assert s.kv_per_position > 0
    q8 = reads.from_header(meta, tensors, "q8_0", "q8_0")
    assert q8.kv_per_position == pytest.approx(s.kv_per_position * 34 / 32 / 2, rel=0.01)  # 34 bytes a 32 vs 2 a value


# --- records: steps and bytes per token -----------------------------------------------------------------


def run(mode="speculative", engine=None, n_tokens=65, rounds=20, drafted=80, accepted=44, decode_s=2.0, requests=None,
        target=None, draft=None, strategy=None, **config):
    return parse({"pair": "P", "mode": mode,
                  "config": {"k": 4 if mode == "speculative" else 0, "engine": engine, "n_predict": 64,
                             "strategy": strategy, **config},
                  "metrics": {"n_tokens": n_tokens, "decode_s": decode_s, "tokens_per_s": n_tokens / decode_s,
                              "prompt_tokens": 20, "rounds": rounds, "drafted": drafted, "accepted": accepted,
                              "requests": requests},
                  "models": {"target": {"file": "t.gguf", "path": str(target) if target else None},
                             "draft": {"file": "d.gguf", "path": str(draft) if draft else None}}})


def test_steps_of_the_python_loop_are_its_rounds():
    r = run()
    assert decode_steps(r) == 20
    row = run_row(r)
    assert row["steps_per_s"] == pytest.approx(10)
    assert row["tokens_per_step"] == pytest.approx(65 / 20)
    assert row["steps_per_s"] * row["tokens_per_step"] == pytest.approx(row["tokens_per_s"])


def test_steps_through_llama_server_are_tokens_less_accepted_less_the_first():
    # /metrics counted 15 drafting rounds; 65 tokens, 44 of them accepted drafts, the first from the prompt: 20 steps
    r = run(engine="server", rounds=15)
    assert decode_steps(r) == 65 - 44 - 1
    # several requests at once: each one's first token comes from its prompt
    both = run(engine="server", n_tokens=130, accepted=88, requests=[{"error": None}, {"error": None}, {"error": "x"}])
    assert decode_steps(both) == 130 - 88 - 2
    assert decode_steps(run(engine="endpoint", accepted=None)) is None  # no timings: not known
    alone = run(mode="target", engine="server", accepted=0, rounds=0)
    assert decode_steps(alone) == 64 and run_row(alone)["tokens_per_step"] == pytest.approx(65 / 64)


def test_a_failed_run_has_no_steps():
    r = parse({"pair": "P", "mode": "speculative", "error": "boom", "config": {"k": 4}})
    assert decode_steps(r) is None
    row = run_row(r)
    assert row["steps_per_s"] is None and row["tokens_per_step"] is None and row["bytes_per_token"] is None


def test_a_runs_bytes_per_token_from_its_files(tiny_pairs):
    target, draft = tiny_pairs["high"]
    t = reads.file_bytes(str(target))
    d = reads.file_bytes(str(draft))
    alone = run(mode="target", target=target, draft=draft)
    context = 20 + 65 / 2
    assert run_row(alone)["bytes_per_token"] == pytest.approx(t.step(context))
    spec = run(target=target, draft=draft)  # 20 steps, 80 drafted (4 a step), 44 accepted: tau = 64 / 20
    want = (t.step(context, 5) + 4 * d.step(context)) / (64 / 20)
    assert run_row(spec)["bytes_per_token"] == pytest.approx(want)
    ngram = run(target=target, draft=draft, strategy={"spec_type": "ngram"})
    assert run_row(ngram)["bytes_per_token"] == pytest.approx(t.step(context, 5) / (64 / 20))
    assert run_row(run(target=target, draft=target.parent / "gone.gguf"))["bytes_per_token"] is None  # not here
    shared = run(engine="server", target=target, draft=draft, requests=[{"error": None}, {"error": None}])
    assert run_row(shared)["bytes_per_token"] is None  # slots batch their steps: not this arithmetic


# --- the summary's columns and the table's line ---------------------------------------------------------


def summary(**extra):
    rows = {"mode": ["target", "speculative", "speculative"], "strategy": ["", "draft", "draft"], "k": [0, 2, 4],
            "tokens_per_s": [10.0, 30.0, 15.0], "bytes_per_token": [1e9, 0.8e9, 0.5e9], "host": ["local"] * 3,
            "cpu": ["CPU X"] * 3, "target_offload": ["0/19"] * 3, "draft_offload": ["0/19"] * 3}
    return pd.DataFrame({**rows, **extra})


def label(row):
    return "target alone" if row["mode"] == "target" else f"K={row['k']}"


def test_rows_get_their_share_of_the_stored_bandwidth():
    machines = {ceiling.this_host(): {"bandwidth_gbs": 20.0, "cpu": "CPU X"}}
    s = ceiling.with_ceiling(summary(), machines)
    assert list(s["bandwidth_gbs"]) == [20.0] * 3
    assert list(s["ceiling_pct"]) == pytest.approx([50, 120, 37.5])
    lines = ceiling.footer_lines(summary(), label, machines)
    assert lines[0].startswith("target alone at 50% of 20.0 GB/s (the memory-bandwidth ceiling: gguf-bench machine")
    assert "K=2 120%" in lines[1] and "not a measurement of decoding" in lines[1]
    at_100 = summary(tokens_per_s=[10.0, 25.06, 15.0])  # K=2 at 100.24%: printed as 100%, not flagged above it
    assert len(ceiling.footer_lines(at_100, label, machines)) == 1


def test_no_bandwidth_no_columns():
    assert "ceiling_pct" not in ceiling.with_ceiling(summary(), {})
    other = {ceiling.this_host(): {"bandwidth_gbs": 20.0, "cpu": "another CPU"}}  # a results file from elsewhere
    assert "ceiling_pct" not in ceiling.with_ceiling(summary(), other)
    assert ceiling.footer_lines(summary(), label, other) == []


def test_rows_on_a_gpu_are_not_measured_against_the_cpus_bandwidth():
    machines = {ceiling.this_host(): {"bandwidth_gbs": 20.0, "cpu": "CPU X"}}
    s = ceiling.with_ceiling(summary(target_offload=["0/19", "19/19", "0/19"]), machines)
    assert pd.isna(s["ceiling_pct"][1]) and s["ceiling_pct"][2] == pytest.approx(37.5)


def test_a_remote_host_gets_its_own_figure():
    machines = {"node-a": {"bandwidth_gbs": 40.0}}
    s = ceiling.with_ceiling(summary(host=["node-a", "node-b", "node-a"]), machines)
    assert s["ceiling_pct"][0] == pytest.approx(25) and pd.isna(s["ceiling_pct"][1])


# --- gguf-bench machine -------------------------------------------------------------------------------------


def test_llc_size_from_sys(tmp_path):
    for i, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"),
                                             (3, "Unified", "32768K")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert bandwidth.llc_bytes(tmp_path) == 32 * 2**20
    assert bandwidth.llc_bytes(tmp_path / "none") is None
    assert bandwidth.default_size(32 * 2**20) == 1024 * 2**20 and bandwidth.default_size(256 * 2**20) == 2048 * 2**20


def test_likwid_output_parses_and_its_kernel_follows_the_cpu(tmp_path):
    out = "Data volume (Byte):\t1073741824\nMByte/s:\t\t38947.82\nCycles per update:\t0.55\n"
    assert bandwidth.parse_likwid(out) == pytest.approx(38.94782)
    assert bandwidth.parse_likwid("ERROR: nothing") is None
    (tmp_path / "avx").write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n")
    (tmp_path / "none").write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512ifma\n")
    assert bandwidth.likwid_kernel(tmp_path / "avx") == "load_avx"
    assert bandwidth.likwid_kernel(tmp_path / "none") == "load"
    assert bandwidth.likwid_kernel(tmp_path / "missing") == "load"


def test_machine_prints_likwids_figure_beside_its_own_or_says_how_to_install_it(isolated):
    result = invoke("machine", "--size-mib", "64", "--reps", "2", "-t", "2", "--likwid")
    if shutil.which("likwid-bench") is None:
        assert result.exit_code == 1 and "likwid-bench is not installed (apt-get install likwid)" in result.output
        return
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("likwid-bench read:"))
    assert "best of 2" in line and "-w N:67108864B:2 -i 1" in line
    entry = ceiling.stored_machines()[ceiling.this_host()]
    assert entry["likwid_gbs"] > 0 and entry["likwid_command"].startswith("likwid-bench -t load")


def test_machine_measures_prints_and_stores(isolated):
    result = invoke("machine", "--size-mib", "64", "--reps", "2", "-t", "2", "--no-likwid")
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("memory read bandwidth:"))
    assert "2 threads" in line and "over 64 MiB" in line and "best of 2" in line
    stored = json.loads((isolated / "cache" / ceiling.MACHINE_FILE).read_text())["hosts"]
    entry = stored[ceiling.this_host()]
    assert entry["threads"] == 2 and entry["size_bytes"] == 64 * 2**20 and entry["reps"] == 2
    assert entry["bandwidth_gbs"] > 0 and entry["likwid_gbs"] is None
    assert f"stored for host {ceiling.this_host()}" in result.output
    assert ceiling.stored_machines()[ceiling.this_host()]["bandwidth_gbs"] == entry["bandwidth_gbs"]


def test_report_json_and_table_carry_the_ceiling(tiny_pairs, isolated, tmp_path):
    target, draft = tiny_pairs["high"]
    ceiling.store_machine(ceiling.this_host(), {"bandwidth_gbs": 10.0, "cpu": None})
    runs = [run(mode="target", target=target, draft=draft, rounds=0, accepted=0, drafted=0, repetition=i) for i in (0, 1)]
    runs += [run(target=target, draft=draft, repetition=i) for i in (0, 1)]
    results = tmp_path / "r.jsonl"
    from gguf_bench.results.schema.records import to_dict

    results.write_text("".join(json.dumps(to_dict(r), default=str) + "\n" for r in runs))
    rows = json.loads(invoke("report", str(results), "--format", "json").output)
    for row in rows:
        assert row["bytes_per_token"] > 0 and row["bandwidth_gbs"] == 10.0
        assert row["ceiling_pct"] == pytest.approx(100 * row["tokens_per_s"] * row["bytes_per_token"] / 10e9)
        assert row["steps_per_s"] * row["tokens_per_step"] == pytest.approx(row["tokens_per_s"])
    table = invoke("report", str(results)).output
    assert "of 10.0 GB/s (the memory-bandwidth ceiling: gguf-bench machine" in table


def test_each_run_stores_its_bytes_per_token_so_a_report_without_the_files_has_them(tiny_pairs, isolated):
    """A sweep's records carry the bytes each run's decode read (from the headers where it ran): a report on a
    machine without the model files (here: the records' paths moved away) gives the same figures."""
    result = invoke("sweep", *pair_args(tiny_pairs["high"]), "-K", "2", "-n", "8", "-t", "1", "--prompt-ids",
                    "code-short", "--name", "bytes")
    assert result.exit_code == 0, result.output
    path = isolated / "results" / "bytes.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if '"mode"' in line]
    assert {r["mode"] for r in records} == {"target", "draft", "speculative"}
    assert all(r["metrics"]["bytes_per_token"] > 0 for r in records)
    here = {row["mode"]: row["bytes_per_token"] for row in json.loads(invoke("report", str(path), "--format", "json").output)}
    for r in records:
        for model in r["models"].values():
            if isinstance(model, dict) and model.get("path"):
                model["path"] = "/elsewhere/" + Path(model["path"]).name
    moved = path.with_name("moved.jsonl")
    moved.write_text("".join(json.dumps(r) + "\n" for r in records))
    elsewhere = {row["mode"]: row["bytes_per_token"] for row in json.loads(invoke("report", str(moved), "--format", "json").output)}
    assert elsewhere == pytest.approx(here) and all(v > 0 for v in elsewhere.values())
