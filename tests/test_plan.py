"""The offload planner: llama.cpp's placement rules on a tiny model's header, and `plan` reading only the header of
a model on the hub (range requests to a local server that speaks the hub's protocol). Its numbers against
llama.cpp's own allocations are checked in tests/test_offload.py (on a GPU build) and scripts/bench_plan.py."""

from __future__ import annotations

import os
import subprocess
import sys

from cli_helpers import assert_user_error, invoke, pair_args

from gguf_bench.models.gguf import tensor_table
from gguf_bench.models.memory import Shape, device_bytes, kv_cells, plan

from hubserver import HubServer


def test_output_layer_first_then_the_last_blocks(tiny_pairs):
    shape = Shape.from_header(*tensor_table(tiny_pairs["middle"][0]))
    assert shape.n_layers == 4 and shape.total_layers == 5
    kv_layer = kv_cells(300) * shape.n_head_kv * (shape.head_k + shape.head_v) * 2
    assert kv_cells(300) == 512
    none, output, two, every = (device_bytes(shape, n, 300) for n in (0, 1, 2, 99))
    assert (none.layers, none.weights, none.kv) == (0, 0, 0)
    assert output.weights == sum(shape.output_tensors) and output.kv == 0  # the output layer has no KV cache
    assert two.weights == sum(shape.output_tensors) + shape.block_bytes[-1] and two.kv == kv_layer
    assert every.layers == 5 and every.weights == sum(shape.output_tensors) + sum(shape.block_bytes)
    assert every.kv == 4 * kv_layer and every.compute == two.compute > 0
    assert device_bytes(shape, 2, 300, max_alloc=1).weights == shape.block_bytes[-1]  # no weight fits a tiny buffer


def test_plan_gives_the_largest_ngl_beside_each_draft(tiny_pairs):
    t, d = (Shape.from_header(*tensor_table(p)) for p in tiny_pairs["middle"])
    budget = device_bytes(t, 3, 512).total + device_bytes(d, 1, 512).total
    rows = {r.ngld: r for r in plan(t, d, budget, 512, [0, 1, 99])}
    assert rows[1].target.layers == 3 and rows[1].used <= budget
    assert rows[0].target.layers >= 3  # no draft on the device: at least as much room
    assert rows[5].target is None or rows[5].target.layers <= 3  # the whole draft there: at most as much


def test_plan_command_on_files_and_its_bad_input(tiny_pairs):
    result = invoke("plan", *pair_args(tiny_pairs["middle"]), "--vram", "1GB", "--ctx", "512")
    assert result.exit_code == 0, result.output
    assert "largest -ngl" in result.output and "5/5" in result.output
    assert_user_error(invoke("plan", *pair_args(tiny_pairs["middle"]), "--vram", "lots"), "bad --vram 'lots'")


def test_plan_reads_only_the_header_of_a_hub_model(tiny_pairs, tmp_path):
    target, draft = tiny_pairs["middle"]
    reg = tmp_path / "models.yaml"
    reg.write_text("default: tiny\nmodels:\n  t: {hf: {repo: acme/tiny-GGUF, file: t.gguf}}\n"
                   "  d: {hf: {repo: acme/tiny-GGUF, file: d.gguf}}\npairs:\n  tiny: {target: t, draft: d}\n")
    with HubServer() as server:
        server.state.files["acme/tiny-GGUF"] = {"t.gguf": target.read_bytes(), "d.gguf": draft.read_bytes()}
        env = {**os.environ, "HF_ENDPOINT": server.url, "HF_HUB_DISABLE_XET": "1", "GGUF_BENCH_HEADER_READ": "1024"}
        proc = subprocess.run([sys.executable, "-m", "gguf_bench.cli", "plan", "--registry", str(reg), "--vram", "1GB",
                               "--ctx", "512"], capture_output=True, text=True, env=env, timeout=120)
        gets = [r for r in server.state.requests if r[0] == "GET" and "/resolve/" in r[1]]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "largest -ngl" in proc.stdout and "5/5" in proc.stdout
    assert gets and all(rng and rng.startswith("bytes=0-") for _, _, rng in gets), gets  # ranges only, growing
    assert not (tmp_path / "hf").exists() or not list((tmp_path / "hf").rglob("t.gguf"))  # nothing downloaded


def test_sweep_skips_a_setting_that_cannot_fit_and_keeps_its_reason(tiny_pairs, isolated):
    from cli_helpers import stored

    result = invoke("sweep", *pair_args(tiny_pairs["middle"]), "--name", "fit", "-K", "2", "-ngl", "0,all",
                    "--prompt-ids", "code-short", "-n", "4", "--vram", "100KB", "--no-draft-alone")
    assert result.exit_code == 0, result.output
    records = stored(isolated / "results" / "fit.jsonl")
    skipped = [r for r in records if r["config"]["ngl"] == "all"]
    assert len(records) == 4 and len(skipped) == 2
    assert all(r["error"].startswith("skipped: -ngl all -ngld 0: predicted") and "> 0 MiB available" in r["error"]
               for r in skipped), skipped
    assert all(r["error"] is None for r in records if r["config"]["ngl"] == 0)


def _speed_cells(output: str) -> list[tuple[float | None, float | None]]:
    """The target and draft t/s cells of each row of plan's table ('–': None)."""
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in output.splitlines() if line.startswith("│")]
    return [tuple(None if c == "–" else float(c) for c in row[-2:]) for row in rows]


def _no_twins_left(cache) -> bool:
    return not cache.exists() or not [p for p in cache.iterdir() if p.name.startswith("plan-twins-")]


def test_plan_measure_shows_each_rows_speed_from_twins_and_stores_the_runs(tiny_pairs, isolated):
    from cli_helpers import stored

    from gguf_bench.engines.llama_cpp import gpu_offload_supported

    result = invoke("plan", *pair_args(tiny_pairs["middle"]), "--vram", "1GB", "--ctx", "512", "--measure",
                    "--measure-n", "8", "--name", "fits")
    assert result.exit_code == 0, result.output
    assert "target t/s" in result.output and "draft t/s" in result.output
    assert "twins (synthetic weights: speed only) measured on this machine" in result.output and "-n 8" in result.output
    speeds = _speed_cells(result.stdout)
    assert len(speeds) == 4 and all(t and t > 0 and d and d > 0 for t, d in speeds), result.stdout
    records = stored(isolated / "results" / "fits.jsonl")
    assert records and all(r["models"]["target"]["twin"] and r["models"]["draft"]["twin"] for r in records)
    assert {r["pair"] for r in records} == {f"{tiny_pairs['middle'][0].name}+{tiny_pairs['middle'][1].name} twin"}
    assert sorted(r["mode"] for r in records[:2]) == ["draft", "target"] and "speculative" not in {r["mode"] for r in records}
    if not gpu_offload_supported():  # every row runs on the CPU: one setting, measured once
        assert len(records) == 2 and {(r["config"]["ngl"], r["config"]["ngld"]) for r in records} == {(0, 0)}
        assert "-ngl/-ngld are ignored" in result.stderr and "every row ran on the CPU" in result.stdout
    assert _no_twins_left(isolated / "cache")
    assert "⧉" in invoke("report", str(isolated / "results" / "fits.jsonl")).stdout


def test_plan_measure_errors_are_one_line_and_leave_no_twins(tiny_pairs, isolated, monkeypatch):
    from gguf_bench.cli import progress
    from gguf_bench.errors import BenchError
    from gguf_bench.measure import python_engine
    from gguf_bench.models import twin as twin_mod

    monkeypatch.setattr(progress, "gpu_offload_supported", lambda: True)  # no CPU-build warning line beside the error
    text = isolated / "notes.txt"
    text.write_text("not a model\n")
    args = ["--vram", "1GB", "--ctx", "512", "--measure", "--measure-n", "4"]
    assert_user_error(invoke("plan", "--target", str(text), "--draft", str(tiny_pairs["middle"][1]), *args),
                      "is not a GGUF file")
    assert_user_error(invoke("plan", *pair_args(tiny_pairs["middle"]), "--measure-n", "4"), "go with --measure")

    def no_load(*_args):
        raise BenchError("cannot map the file")

    monkeypatch.setattr(python_engine, "LoadedPair", no_load)
    assert_user_error(invoke("plan", *pair_args(tiny_pairs["middle"]), *args),
                      "measuring the twins: model load failed: cannot map the file")
    monkeypatch.setattr(twin_mod.shutil, "disk_usage", lambda _: type("U", (), {"free": 1000})())
    assert_user_error(invoke("plan", *pair_args(tiny_pairs["middle"]), *args), "no room for the twin")
    assert _no_twins_left(isolated / "cache")


def test_plan_measure_of_a_hub_pair_reads_only_ranges(tiny_pairs, tmp_path):
    target, draft = tiny_pairs["middle"]
    with HubServer() as server:
        server.state.files["acme/tiny-GGUF"] = {"tiny-target-F32.gguf": target.read_bytes(),
                                                "tiny-draft-F16.gguf": draft.read_bytes()}
        env = {**os.environ, "HF_ENDPOINT": server.url, "HF_HUB_DISABLE_XET": "1", "GGUF_BENCH_HEADER_READ": "1024"}
        proc = subprocess.run([sys.executable, "-m", "gguf_bench.cli", "plan", "--target",
                               "acme/tiny-GGUF/tiny-target-F32.gguf", "--draft", "acme/tiny-GGUF:f16", "--vram", "1GB",
                               "--ctx", "512", "--measure", "--measure-n", "4"],
                              capture_output=True, text=True, env=env, timeout=300)
        gets = [r for r in server.state.requests if r[0] == "GET" and "/resolve/" in r[1]]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tiny-target-F32.gguf + tiny-GGUF:f16" in proc.stdout and "5/5" in proc.stdout
    assert all(t and t > 0 and d and d > 0 for t, d in _speed_cells(proc.stdout)), proc.stdout
    assert gets and all(rng and rng.startswith("bytes=0-") for _, _, rng in gets), gets  # ranges only, growing
    assert not list((tmp_path / "hf").rglob("*.gguf"))  # nothing downloaded
    assert _no_twins_left(tmp_path / "cache") and list((tmp_path / "results").glob("plan-*.jsonl"))
