"""The offload planner: llama.cpp's placement rules on a tiny model's header, and `plan` reading only the header of
a model on the hub (range requests to a local server that speaks the hub's protocol). Its numbers against
llama.cpp's own allocations are checked in tests/test_offload.py (on a GPU build) and scripts/bench_plan.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from cli_helpers import assert_user_error, invoke, pair_args

from gguf_bench.errors import ConfigError
from gguf_bench.models.offload_plan import (
    Budget,
    Shape,
    compute_estimate,
    device_bytes,
    fits,
    kv_bytes_per_layer,
    kv_cells,
    layer_devices,
    plan,
    tensor_bytes,
)
from gguf_bench.models.parts import tensor_table
from gguf_bench.options import ALL_LAYERS
from gguf_bench.placing import Placing

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
    assert every.kv == 4 * kv_layer and every.compute == compute_estimate(shape, 300, output=True) > 0
    assert two.compute > every.compute  # op offload copies a CPU block's weight into the device's buffer
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
    assert "-ngl" in result.output and "5/5" in result.output and "-ncmoe" in result.output
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
    assert "-ncmoe" in proc.stdout and "5/5" in proc.stdout
    assert gets and all(rng and rng.startswith("bytes=") for _, _, rng in gets), gets  # ranges only, each going on
    assert [rng for _, path, rng in gets if path.endswith("/t.gguf")][:2] == ["bytes=0-1023", "bytes=1024-2047"], gets
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

    from gguf_bench.runtimes.llama_cpp import gpu_offload_supported

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
    from gguf_bench.measure.engines import python as python_engine
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
    assert gets and all(rng and rng.startswith("bytes=") for _, _, rng in gets), gets  # ranges only, each going on
    assert not list((tmp_path / "hf").rglob("*.gguf"))  # nothing downloaded
    assert _no_twins_left(tmp_path / "cache") and list((tmp_path / "results").glob("plan-*.jsonl"))


# --- experts, tensor overrides and devices (placing.Placing), budgets per device ---

def _header(path):
    meta, tensors = tensor_table(path)
    return Shape.from_header(meta, tensors), {t.name: tensor_bytes(t.type_name, t.shape) for t in tensors}


def test_expert_bytes_are_kept_apart_from_the_rest_of_each_block(moe_pair):
    shape, sizes = _header(moe_pair[0])
    assert shape.has_experts and shape.n_layers == 4
    for i in range(4):
        experts = sum(b for n, b in sizes.items() if n.startswith(f"blk.{i}.") and "_exps" in n)
        rest = sum(b for n, b in sizes.items() if n.startswith(f"blk.{i}.") and "_exps" not in n)
        assert (shape.expert_bytes[i], shape.block_bytes[i]) == (experts, rest) and experts > rest > 0
    assert {w.name for w in shape.weights if w.expert} == {n for n in sizes if "_exps" in n}


@pytest.mark.parametrize(("n_cpu_moe", "layers"), [(2, [0, 1]), (ALL_LAYERS, [0, 1, 2, 3])])
def test_n_cpu_moe_keeps_the_experts_of_the_first_layers_on_the_cpu_as_llama_cpp_does(moe_pair, n_cpu_moe, layers):
    """The predicted CPU-held experts are the header's bytes of those tensors, and the layers llama.cpp's own
    override log names (this CPU build places them as any build does: the overrides do not depend on -ngl)."""
    from gguf_bench.runtimes.llama_cpp import Model

    shape, sizes = _header(moe_pair[0])
    placing = Placing(n_cpu_moe=n_cpu_moe)
    full, kept = device_bytes(shape, ALL_LAYERS, 256), device_bytes(shape, ALL_LAYERS, 256, placing=placing)
    held = sum(b for n, b in sizes.items() if "_exps" in n and int(n.split(".")[1]) in layers)
    assert kept.expert_layers == tuple(layers) and kept.cpu_experts == held
    assert kept.weights == full.weights - held and (kept.kv, kept.layers) == (full.kv, 5)
    largest = max(b for n, b in sizes.items() if "_exps" in n)  # op offload copies a CPU expert tensor for its matmul
    assert kept.compute == compute_estimate(shape, 256, output=True, copied=largest) > full.compute
    assert device_bytes(shape, 0, 256, placing=placing).cpu_experts == held
    with Model(moe_pair[0], 0, 256, 2, None, placing) as model:
        where = model.placement.expert_layers  # {'CPU': [0, 1]}; a GPU build names its host buffer: Vulkan_Host
    assert list(where.values()) == [layers] and all(b == "CPU" or b.endswith("_Host") for b in where), where


def test_tensor_overrides_come_first_and_name_a_cpu_or_a_device(moe_pair):
    shape, sizes = _header(moe_pair[0])
    up3 = sizes["blk.3.ffn_up_exps.weight"]
    one = device_bytes(shape, ALL_LAYERS, 256, placing=Placing(overrides=((r"blk\.3\.ffn_up_exps", "CPU"),)))
    assert (one.expert_layers, one.cpu_experts) == ((3,), up3)
    budget = Budget((("Dev0", 10**9), ("Dev1", 10**9)))
    # -ot before -ncmoe: blk.0's up experts go to Dev1 though -ncmoe 4 sends every other expert to the CPU
    sent = Placing(n_cpu_moe=4, overrides=((r"blk\.0\.ffn_up_exps", "Dev1"),), devices=("Dev0",))
    got = device_bytes(shape, 0, 256, placing=sent, budget=budget)  # no layer offloaded: only what -ot sent
    assert got.layers == 0 and got.used()["Dev1"] == up3 + compute_estimate(shape, 256) and got.kv == 0
    assert got.cpu_experts == sum(shape.expert_bytes) - up3
    none = device_bytes(shape, ALL_LAYERS, 256, placing=Placing(devices=("none",)))
    assert (none.layers, none.total, none.by_device) == (0, 0, ())


def test_layers_split_over_named_devices_by_their_budgets_and_the_draft_counts_where_it_goes(moe_pair):
    shape, _ = _header(moe_pair[0])
    budget = Budget.parse("A=1GB,B=3GB")  # shares 1/4, 3/4: of 5 layers, blk.0-1 on A; blk.2-3 and output on B
    assert layer_devices(4, ALL_LAYERS, budget.devices) == ["A", "A", "B", "B", "B"]
    assert layer_devices(4, 2, budget.devices) == [None, None, None, "A", "B"]
    split = device_bytes(shape, ALL_LAYERS, 256, budget=budget)
    kv = kv_bytes_per_layer(shape, 256)
    assert split.kv == 4 * kv and split.compute == 2 * compute_estimate(shape, 256)  # each device reserves its own
    assert split.used()["A"] == sum(shape.block_bytes[:2]) + sum(shape.expert_bytes[:2]) + 2 * kv + compute_estimate(shape, 256)
    on_b = device_bytes(shape, ALL_LAYERS, 256, placing=Placing(devices=("B",)), budget=budget)
    assert set(on_b.used()) == {"B"} and on_b.weights == split.weights
    tight = Budget((("A", split.used()["A"]), ("B", 3 * split.used()["A"])))  # the same shares: A full, B roomy
    assert fits(shape, None, ALL_LAYERS, 0, 256, tight) is None
    assert fits(shape, shape, ALL_LAYERS, ALL_LAYERS, 256, tight, placing_draft=Placing(devices=("B",))) is None
    why = fits(shape, shape, ALL_LAYERS, ALL_LAYERS, 256, tight, placing_draft=Placing(devices=("A",)))
    assert why.startswith("predicted") and "on A (target 5/5 layers on A" in why and "draft 5/5 layers on A" in why
    assert fits(shape, shape, ALL_LAYERS, ALL_LAYERS, 256, tight, placing_draft=Placing(devices=("none",))) is None
    with pytest.raises(ConfigError, match="no budget for device 'C'"):
        fits(shape, None, ALL_LAYERS, 0, 256, tight, placing=Placing(devices=("C",)))
    # one unnamed budget (--vram 24GB): every device name is that one device, as before
    one = Budget.one(10**9)
    assert device_bytes(shape, 3, 256, placing=Placing(devices=("B",)), budget=one) == device_bytes(shape, 3, 256)


def test_plan_gives_the_fewest_cpu_moe_layers_that_fit_every_layer_best_first(moe_pair):
    t, _ = _header(moe_pair[0])
    d, _ = _header(moe_pair[1])
    draft = device_bytes(d, 0, 512)
    budget = device_bytes(t, ALL_LAYERS, 512, placing=Placing(n_cpu_moe=2)).total + draft.total
    rows = plan(t, d, budget, 512, [0], drafts=(Placing(), Placing(devices=("none",))))
    first, second, on_cpu = rows
    assert (first.placing.n_cpu_moe, first.target.layers) == (2, 5) and first.used <= budget
    assert device_bytes(t, ALL_LAYERS, 512, placing=Placing(n_cpu_moe=1)).total + draft.total > budget
    assert second.placing.is_default and 1 <= second.target.layers < 5 and second.free >= 0
    assert on_cpu.placing_draft.no_offload and on_cpu.draft.total == 0 and on_cpu.target.layers == 5
    assert on_cpu.placing.n_cpu_moe < 2  # the draft off the device leaves the target more room


def test_plan_and_sweep_read_a_budget_per_device_and_refuse_bad_ones(moe_pair, monkeypatch):
    from gguf_bench.measure import capacity
    from gguf_bench.runtimes.llama_cpp import Device

    assert Budget.parse("24GB") == Budget.one(24 * 10**9) and not Budget.parse("24GB").named
    assert Budget.parse(" Vulkan0 = 8GB , CUDA1=1GiB").devices == (("Vulkan0", 8 * 10**9), ("CUDA1", 2**30))
    for bad, needle in (("A=1GB,=2GB", "NAME=SIZE once per device"), ("A=1GB,A=2GB", "NAME=SIZE once per device"),
                        ("A=1GB,2GB", "NAME=SIZE once per device"), ("A=", "NAME=SIZE"), ("A=lots", "bad --vram size of A 'lots'")):
        assert_user_error(invoke("plan", *pair_args(moe_pair), "--vram", bad), needle)
    gpus = [Device("Vulkan0", "a", "GPU", 8 * 2**30, 8 * 2**30), Device("Vulkan1", "b", "GPU", 8 * 2**30, 8 * 2**30)]
    monkeypatch.setattr(capacity, "gpu_devices", lambda: gpus)  # a build with two GPU devices (names only)
    assert capacity.vram_budget("Vulkan1=2GB,Vulkan0=1GB").devices == (("Vulkan0", 10**9), ("Vulkan1", 2 * 10**9))
    with pytest.raises(ConfigError, match="this build has no device 'CUDA1'; it has Vulkan0, Vulkan1"):
        capacity.vram_budget("Vulkan0=8GB,CUDA1=24GB")
    assert_user_error(invoke("sweep", *pair_args(moe_pair), "--vram", "Vulkan0=8GB,CUDA1=24GB", "-K", "1"),
                      "no device 'CUDA1'")


def test_sweep_check_passes_the_placings_of_each_setting(moe_pair):
    from gguf_bench.measure import capacity
    from gguf_bench.measure.pair import LoadConfig, PairFiles

    t, _ = _header(moe_pair[0])
    d, _ = _header(moe_pair[1])
    files = PairFiles(*moe_pair, "moe")
    budget = Budget.one(device_bytes(t, ALL_LAYERS, 512, placing=Placing(n_cpu_moe=2)).total + device_bytes(d, 0, 512).total)
    why = capacity.does_not_fit(files, LoadConfig(ngl=ALL_LAYERS, n_ctx=512), 512, budget)
    assert why.startswith("-ngl all -ngld 0: predicted") and "> " in why
    two = LoadConfig(ngl=ALL_LAYERS, n_ctx=512, placing=Placing(n_cpu_moe=2))
    assert capacity.does_not_fit(files, two, 512, budget) is None
    off = LoadConfig(ngl=ALL_LAYERS, ngld=ALL_LAYERS, n_ctx=512, placing=Placing(n_cpu_moe=2),
                     placing_draft=Placing(devices=("none",)))
    assert capacity.does_not_fit(files, off, 512, budget) is None  # the draft on the CPU takes nothing there
